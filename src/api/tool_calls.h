// Tool calls in the model's own syntax, parsed into OpenAI's `tool_calls` (and, for tool_choice "required" or a
// named function, written by the constrained sampler: see api/tool_choice.cpp). Four families:
// - hermes (Qwen3, and the default for templates without a syntax of their own):
//   <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>, one block per call;
// - kimi (Kimi K2): <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>
//   {...}<|tool_call_end|>...<|tool_calls_section_end|>;
// - kimi_k3 (Kimi K3): tags <|open|>call tool="NAME" index="1"<|sep|> ... <|close|>call<|sep|> inside a tools
//   element, arguments as argument or json elements (tool_stream_k3.cpp);
// - harmony (gpt-oss): messages <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>; the
//   final channel is the content, the analysis channel (reasoning) is left out.
// The text parsed is the generated text with special tokens kept (the markers are special tokens in Kimi's and
// gpt-oss's vocabularies). The parser is incremental (tool_stream.h); parse_tool_calls feeds it the whole text.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::api {

enum class ToolSyntax { hermes, kimi, kimi_k3, harmony };

// From the chat template's source: kimi_k3 when it writes <|open|> tags with a call tag, kimi when it writes
// <|tool_calls_section_begin|>, harmony when it writes "to=functions.", else hermes.
ToolSyntax tool_syntax_of(std::string_view template_source);

struct ToolCall {
    std::string id;         // kimi: its own "functions.NAME:IDX"; else "call_" + 24 hex digits
    std::string name;
    std::string arguments;  // JSON text, compact (whitespace outside strings dropped), as the model wrote it
};

struct ToolOutput {
    std::string content;          // the text that is not a call (whitespace next to calls left out)
    std::vector<ToolCall> calls;  // in order; empty: no call (the text is all content)
    bool cut = false;             // the last call was not closed (the output ended inside it)
};

// Never throws: a hermes block that does not parse stays in the content. prompt_tail: the rendered prompt's end
// (Kimi K3's output starts inside the element its generation prompt opens).
ToolOutput parse_tool_calls(ToolSyntax syntax, std::string_view text, std::string_view prompt_tail = {});

// The special tokens the syntaxes are made of (Kimi K2's section markers, K3's tags, harmony's message framing).
const std::vector<std::string>& tool_call_markers();

// message.tool_calls: [{"id", "type": "function", "function": {"name", "arguments"}}]
nlohmann::json tool_calls_json(const std::vector<ToolCall>& calls);

}  // namespace sluice::api
