// Tool-call syntaxes (see tool_calls.h): which one a template writes, and the whole-text parse (the incremental
// parser of tool_stream.h fed everything at once, so a stream adds up to the same message).
#include "api/tool_calls.h"

#include "api/tool_stream.h"

namespace sluice::api {

ToolSyntax tool_syntax_of(std::string_view src) {
    if (src.find("<|open|>") != std::string_view::npos && src.find("<|sep|>") != std::string_view::npos &&
        src.find("'call'") != std::string_view::npos)
        return ToolSyntax::kimi_k3;
    if (src.find("<|tool_calls_section_begin|>") != std::string_view::npos) return ToolSyntax::kimi;
    if (src.find("to=functions.") != std::string_view::npos ||
        src.find("<|start|>assistant to=") != std::string_view::npos)
        return ToolSyntax::harmony;
    return ToolSyntax::hermes;
}

ToolOutput parse_tool_calls(ToolSyntax syntax, std::string_view text, std::string_view prompt_tail) {
    ToolCallStream s(syntax, prompt_tail);
    ToolDelta d = s.push(text);
    d.append(s.finish());
    ToolOutput out;
    out.content = std::move(d.content);
    for (CallDelta& c : d.calls) {
        if (c.first)
            out.calls.push_back({std::move(c.id), std::move(c.name), std::move(c.arguments)});
        else if (!out.calls.empty())
            out.calls.back().arguments += c.arguments;
    }
    out.cut = s.call_open();
    return out;
}

const std::vector<std::string>& tool_call_markers() {
    static const std::vector<std::string> m = {
        "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
        "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>",
        "<|channel|>", "<|message|>", "<|start|>", "<|end|>", "<|call|>", "<|constrain|>", "<|return|>"};
    return m;
}

nlohmann::json tool_calls_json(const std::vector<ToolCall>& calls) {
    nlohmann::json a = nlohmann::json::array();
    for (const ToolCall& c : calls)
        a.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    return a;
}

}  // namespace sluice::api
