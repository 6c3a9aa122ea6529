// Tool calls in the model's own syntax, parsed into OpenAI's `tool_calls` (and, for tool_choice "required" or a
// named function, written by the constrained sampler: see tool_constraint.h). Three families:
// - hermes (Qwen3, and the default for templates without a syntax of their own):
//   <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>, one block per call;
// - kimi (Kimi K2/K3): <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>
//   {...}<|tool_call_end|>...<|tool_calls_section_end|>;
// - harmony (gpt-oss): messages <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>; the
//   final channel is the content, the analysis channel (reasoning) is left out.
// The text parsed is the generated text with special tokens kept (the markers are special tokens in Kimi's and
// gpt-oss's vocabularies).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::api {

enum class ToolSyntax { hermes, kimi, harmony };

// From the chat template's source: kimi when it writes <|tool_calls_section_begin|>, harmony when it writes
// "to=functions.", else hermes.
ToolSyntax tool_syntax_of(std::string_view template_source);

struct ToolCall {
    std::string id;         // kimi: its own "functions.NAME:IDX"; else "call_" + 24 hex digits
    std::string name;
    std::string arguments;  // JSON text
};

struct ToolOutput {
    std::string content;          // the text that is not a call (trimmed)
    std::vector<ToolCall> calls;  // in order; empty: no call (the text is all content)
};

// Never throws: a block that does not parse stays in the content.
ToolOutput parse_tool_calls(ToolSyntax syntax, std::string_view text);

// The special tokens the syntaxes are made of (Kimi's section markers, harmony's message framing).
const std::vector<std::string>& tool_call_markers();

// message.tool_calls: [{"id", "type": "function", "function": {"name", "arguments"}}]
nlohmann::json tool_calls_json(const std::vector<ToolCall>& calls);

}  // namespace sluice::api
