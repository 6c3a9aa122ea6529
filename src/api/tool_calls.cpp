// Tool-call parsing for the three syntaxes (see tool_calls.h).
#include "api/tool_calls.h"

#include <random>

namespace sluice::api {

namespace {

using ojson = nlohmann::ordered_json;

std::string trim(std::string_view s) {
    const auto ws = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; };
    while (!s.empty() && ws(s.front())) s.remove_prefix(1);
    while (!s.empty() && ws(s.back())) s.remove_suffix(1);
    return std::string(s);
}

std::string call_id() {
    static thread_local std::mt19937_64 rng(std::random_device{}());
    static const char* hex = "0123456789abcdef";
    std::string id = "call_";
    for (int i = 0; i < 24; ++i) id += hex[rng() & 15];
    return id;
}

// A JSON text as one compact line when it parses, else as written.
std::string compact(std::string_view args) {
    const ojson j = ojson::parse(args, nullptr, false);
    return j.is_discarded() ? trim(args) : j.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

ToolOutput parse_hermes(std::string_view text) {
    ToolOutput out;
    const std::string_view open = "<tool_call>", close = "</tool_call>";
    std::string content;
    size_t pos = 0;
    while (pos < text.size()) {
        const size_t b = text.find(open, pos);
        if (b == std::string_view::npos) break;
        size_t e = text.find(close, b + open.size());
        const std::string_view inner =
            text.substr(b + open.size(), (e == std::string_view::npos ? text.size() : e) - b - open.size());
        const ojson j = ojson::parse(inner, nullptr, false);
        const size_t next = e == std::string_view::npos ? text.size() : e + close.size();
        if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string()) {
            content += text.substr(pos, next - pos);
            pos = next;
            continue;
        }
        content += text.substr(pos, b - pos);
        ToolCall c;
        c.id = call_id();
        c.name = j["name"].get<std::string>();
        const auto a = j.find("arguments");
        c.arguments = a == j.end() || a->is_null() ? "{}"
                      : a->is_string()             ? a->get<std::string>()
                                                   : a->dump(-1, ' ', false, ojson::error_handler_t::replace);
        out.calls.push_back(std::move(c));
        pos = next;
    }
    content += text.substr(std::min(pos, text.size()));
    out.content = trim(content);
    return out;
}

ToolOutput parse_kimi(std::string_view text) {
    ToolOutput out;
    const std::string_view sec = "<|tool_calls_section_begin|>", sec_end = "<|tool_calls_section_end|>",
                           begin = "<|tool_call_begin|>", arg = "<|tool_call_argument_begin|>",
                           end = "<|tool_call_end|>";
    const size_t s = text.find(sec);
    if (s == std::string_view::npos) {
        out.content = trim(text);
        return out;
    }
    std::string content(text.substr(0, s));
    const size_t se = text.find(sec_end, s);
    const std::string_view body = text.substr(s + sec.size(), (se == std::string_view::npos ? text.size() : se) - s -
                                                                 sec.size());
    size_t pos = 0;
    while (true) {
        const size_t b = body.find(begin, pos);
        if (b == std::string_view::npos) break;
        const size_t a = body.find(arg, b);
        if (a == std::string_view::npos) break;
        size_t e = body.find(end, a);
        const std::string id = trim(body.substr(b + begin.size(), a - b - begin.size()));
        const std::string_view args =
            body.substr(a + arg.size(), (e == std::string_view::npos ? body.size() : e) - a - arg.size());
        ToolCall c;
        c.id = id;
        std::string name = id;
        if (name.rfind("functions.", 0) == 0) name = name.substr(10);
        if (const size_t colon = name.rfind(':'); colon != std::string::npos) name = name.substr(0, colon);
        c.name = name;
        c.arguments = compact(args);
        out.calls.push_back(std::move(c));
        if (e == std::string_view::npos) break;
        pos = e + end.size();
    }
    if (se != std::string_view::npos) content += text.substr(se + sec_end.size());
    out.content = trim(content);
    return out;
}

ToolOutput parse_harmony(std::string_view text) {
    ToolOutput out;
    const std::string_view msg = "<|message|>";
    if (text.find(msg) == std::string_view::npos) {
        out.content = trim(text);
        return out;
    }
    std::string content;
    size_t pos = 0;
    while (pos < text.size()) {
        const size_t m = text.find(msg, pos);
        if (m == std::string_view::npos) break;
        std::string_view header = text.substr(pos, m - pos);
        if (const size_t st = header.rfind("<|start|>"); st != std::string_view::npos) header = header.substr(st);
        size_t e = text.size();
        std::string_view stop_marker;
        for (std::string_view t : {"<|end|>", "<|call|>", "<|return|>", "<|start|>"}) {
            const size_t f = text.find(t, m + msg.size());
            if (f < e) e = f, stop_marker = t;
        }
        const std::string_view body = text.substr(m + msg.size(), e - m - msg.size());
        if (const size_t to = header.find("to=functions."); to != std::string_view::npos) {
            size_t n = to + 13, k = n;
            while (k < header.size() && header[k] != ' ' && header[k] != '<' && header[k] != '\n') ++k;
            ToolCall c;
            c.id = call_id();
            c.name = std::string(header.substr(n, k - n));
            c.arguments = compact(body);
            out.calls.push_back(std::move(c));
        } else if (header.find("final") != std::string_view::npos) {
            content += body;
        }
        // the next message's header starts at its <|start|>
        pos = e == text.size() || stop_marker == "<|start|>" ? e : e + stop_marker.size();
    }
    out.content = trim(content);
    return out;
}

}  // namespace

ToolSyntax tool_syntax_of(std::string_view src) {
    if (src.find("<|tool_calls_section_begin|>") != std::string_view::npos) return ToolSyntax::kimi;
    if (src.find("to=functions.") != std::string_view::npos || src.find("<|start|>assistant to=") != std::string_view::npos)
        return ToolSyntax::harmony;
    return ToolSyntax::hermes;
}

ToolOutput parse_tool_calls(ToolSyntax syntax, std::string_view text) {
    switch (syntax) {
        case ToolSyntax::kimi:
            return parse_kimi(text);
        case ToolSyntax::harmony:
            return parse_harmony(text);
        case ToolSyntax::hermes:
            break;
    }
    return parse_hermes(text);
}

const std::vector<std::string>& tool_call_markers() {
    static const std::vector<std::string> m = {"<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
                                               "<|tool_call_begin|>", "<|tool_call_argument_begin|>",
                                               "<|tool_call_end|>", "<|channel|>", "<|message|>", "<|start|>",
                                               "<|end|>", "<|call|>", "<|constrain|>", "<|return|>"};
    return m;
}

nlohmann::json tool_calls_json(const std::vector<ToolCall>& calls) {
    nlohmann::json a = nlohmann::json::array();
    for (const ToolCall& c : calls)
        a.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    return a;
}

}  // namespace sluice::api
