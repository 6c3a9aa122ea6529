// tools and tool_choice on /v1/chat/completions: tool definitions checked (a 400 naming the field, or the path of a
// parameters schema keyword), which calls to parse from the output (tool_calls.h), and for tool_choice "required" or
// a named function a constraint that makes the model write one call in its family's syntax (special tokens
// included: see call_grammar) with arguments that match the function's parameters.
#include <algorithm>
#include <cctype>
#include <map>

#include "api/openai_protocol.h"
#include "core/error.h"
#include "runtime/token_mask.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace sluice::api {

namespace {

using ojson = nlohmann::ordered_json;

// One call in the syntax's form, NAME one of `names`, ARGS an instance of that function's parameters; a special
// token of the syntax is a 0x00 byte and its text (TokenTrie::from_tokenizer's markers):
// - hermes: <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>
// - kimi: <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>ARGS
//   <|tool_call_end|><|tool_calls_section_end|>
// - harmony (after the generation prompt's "<|start|>assistant", as gpt-oss's template writes a call):
//   " to=functions.NAME<|channel|>commentary json<|message|>ARGS<|call|>"
// - kimi_k3 (after the generation prompt's <|open|>think<|sep|>, or <|open|>response<|sep|> when `thinking` is
//   off; T(x) is <|open|>x<|sep|>, /T(x) <|close|>x<|sep|>): [/T(think) T(response)] /T(response) T(tools)
//   T(call tool="NAME" index="1") T(json type="object") ARGS /T(json) /T(call) /T(tools)
schema::Grammar call_grammar(ToolSyntax syntax, const std::vector<std::string>& names,
                             const std::vector<schema::Grammar>& params, bool k3_thinking) {
    const std::string z(1, '\0');
    std::string head, tail, suffix;
    switch (syntax) {
        case ToolSyntax::hermes:
            head = "<tool_call>\n{\"name\": \"", tail = "\", \"arguments\": ", suffix = "}\n</tool_call>";
            break;
        case ToolSyntax::kimi:
            head = z + "<|tool_calls_section_begin|>" + z + "<|tool_call_begin|>functions.";
            tail = ":0" + z + "<|tool_call_argument_begin|>";
            suffix = z + "<|tool_call_end|>" + z + "<|tool_calls_section_end|>";
            break;
        case ToolSyntax::harmony:
            head = " to=functions.", tail = z + "<|channel|>commentary json" + z + "<|message|>";
            suffix = z + "<|call|>";
            break;
        case ToolSyntax::kimi_k3: {
            const auto open = [&](const std::string& t) { return z + "<|open|>" + t + z + "<|sep|>"; };
            const auto close = [&](const std::string& t) { return z + "<|close|>" + t + z + "<|sep|>"; };
            if (k3_thinking) head = close("think") + open("response");
            head += close("response") + open("tools") + z + "<|open|>call tool=\"";
            tail = "\" index=\"1\"" + z + "<|sep|>" + open("json type=\"object\"");
            suffix = close("json") + close("call") + close("tools");
            break;
        }
    }
    schema::Grammar g;
    g.nodes.emplace_back().kind = schema::SchemaNode::Kind::literals;  // the root: one prefix per function
    const int32_t end = int32_t(g.nodes.size());
    g.nodes.emplace_back().kind = schema::SchemaNode::Kind::literals;
    g.nodes[size_t(end)].literals = {suffix};
    std::vector<std::pair<std::string, int32_t>> prefixes;
    for (size_t i = 0; i < names.size(); ++i) {
        const int32_t args = schema::append_grammar(g, params[i]);
        const int32_t seq = int32_t(g.nodes.size());
        schema::SchemaNode& s = g.nodes.emplace_back();
        s.kind = schema::SchemaNode::Kind::sequence;
        s.parts = {args, end};
        prefixes.push_back({head + names[i] + tail, seq});
    }
    std::sort(prefixes.begin(), prefixes.end());
    for (auto& [text, seq] : prefixes) {
        g.nodes[0].literals.push_back(text);
        g.nodes[0].then.push_back(seq);
    }
    g.root = 0;
    return g;
}

// Kimi K3's template opens the think element in the generation prompt unless its `thinking` variable is falsy
// (chat_template_kwargs.thinking: false, null, 0 or empty).
bool k3_thinking(const ojson& body) {
    const auto kw = body.find("chat_template_kwargs");
    if (kw == body.end() || !kw->is_object()) return true;
    const auto t = kw->find("thinking");
    if (t == kw->end()) return true;
    if (t->is_null()) return false;
    if (t->is_boolean()) return t->get<bool>();
    if (t->is_number()) return t->get<double>() != 0;
    if (t->is_string() || t->is_array() || t->is_object()) return !t->empty();
    return true;
}

}  // namespace

ojson parse_tools(const ojson& body, const ModelContext& ctx, ParsedRequest& r) {
    const ojson* tools = nullptr;
    if (auto it = body.find("tools"); it != body.end() && !it->is_null()) tools = &*it;
    std::vector<std::string> names;
    std::vector<schema::Grammar> params;
    if (tools) {
        if (!tools->is_array())
            bad_request("tools", "Invalid type for 'tools': expected an array of tools.", "invalid_type");
        for (size_t i = 0; i < tools->size(); ++i) {
            const ojson& t = (*tools)[i];
            const std::string p = cat("tools[", i, "]");
            if (!t.is_object()) bad_request(p, cat("Invalid type for '", p, "': expected an object."), "invalid_type");
            for (const auto& [k, v] : t.items())
                if (k != "type" && k != "function")
                    bad_request(p + "." + k, cat("Unrecognized tool field: ", p, ".", k));
            if (!t.contains("type")) bad_request(p + ".type", cat("Missing required parameter: '", p, ".type'."));
            if (t["type"] != "function")
                bad_request(p + ".type", cat("Invalid value for '", p, ".type': only 'function' tools are supported."));
            if (!t.contains("function") || t["function"].is_null())
                bad_request(p + ".function", cat("Missing required parameter: '", p, ".function'."),
                            "missing_required_parameter");
            const ojson& f = t["function"];
            if (!f.is_object())
                bad_request(p + ".function", cat("Invalid type for '", p, ".function': expected an object."),
                            "invalid_type");
            for (const auto& [k, v] : f.items()) {
                const std::string fp = p + ".function." + k;
                if (k == "name" || k == "parameters") continue;
                if (k == "description" && !v.is_string() && !v.is_null())
                    bad_request(fp, cat("Invalid type for '", fp, "': expected a string."), "invalid_type");
                if (k == "strict" && !v.is_boolean() && !v.is_null())
                    bad_request(fp, cat("Invalid type for '", fp, "': expected a boolean."), "invalid_type");
                if (k != "description" && k != "strict") bad_request(fp, cat("Unrecognized tool field: ", fp));
            }
            const std::string np = p + ".function.name";
            if (!f.contains("name") || !f["name"].is_string())
                bad_request(np, cat("Missing or invalid '", np, "': a string is required."),
                            "missing_required_parameter");
            const std::string name = f["name"].get<std::string>();
            if (!valid_openai_name(name))
                bad_request(np, cat("Invalid '", np, "': '", name, "' (up to 64 letters, digits, '_' or '-')."));
            if (std::find(names.begin(), names.end(), name) != names.end())
                bad_request(np, cat("Invalid '", np, "': the function '", name, "' is defined twice."));
            const std::string pp = p + ".function.parameters";
            ojson schema = ojson{{"type", "object"}};
            if (f.contains("parameters") && !f["parameters"].is_null()) {
                if (!f["parameters"].is_object())
                    bad_request(pp, cat("Invalid type for '", pp, "': expected a JSON Schema object."), "invalid_type");
                schema = f["parameters"];
            }
            try {
                params.push_back(schema::compile_schema(schema));
            } catch (const schema::SchemaError& e) {
                const std::string at = e.path.empty() ? pp : pp + "." + e.path;
                bad_request(at, cat("Invalid schema for function '", name, "': at '", at, "': ", e.what(), "."));
            }
            if (params.back().nodes[size_t(params.back().root)].kind != schema::SchemaNode::Kind::object)
                bad_request(pp, cat("Invalid '", pp, "': the parameters of a function must be an object schema."));
            names.push_back(name);
        }
    }
    std::string mode = names.empty() ? "none" : "auto", named;
    if (auto it = body.find("tool_choice"); it != body.end() && !it->is_null()) {
        const ojson& c = *it;
        if (c.is_string()) {
            mode = c.get<std::string>();
            if (mode != "none" && mode != "auto" && mode != "required")
                bad_request("tool_choice",
                            cat("Invalid value for 'tool_choice': '", mode,
                                "'. Supported values are: 'none', 'auto', 'required' or a named function."));
        } else if (c.is_object() && c.contains("type") && c["type"] == "function" && c.contains("function") &&
                   c["function"].is_object() && c["function"].contains("name") && c["function"]["name"].is_string()) {
            mode = "named";
            named = c["function"]["name"].get<std::string>();
            if (std::find(names.begin(), names.end(), named) == names.end())
                bad_request("tool_choice.function.name",
                            cat("Invalid 'tool_choice.function.name': no tool is named '", named, "'."));
        } else {
            bad_request("tool_choice",
                        "Invalid 'tool_choice': expected 'none', 'auto', 'required' or "
                        "{\"type\": \"function\", \"function\": {\"name\": ...}}.");
        }
        if ((mode == "required" || mode == "named") && names.empty())
            bad_request("tool_choice", "Invalid 'tool_choice': it asks for a tool call but 'tools' defines none.");
    }
    if (auto it = body.find("parallel_tool_calls"); it != body.end() && !it->is_null() && !it->is_boolean())
        bad_request("parallel_tool_calls", "Invalid type for 'parallel_tool_calls': expected a boolean.",
                    "invalid_type");
    const std::string src = ctx.chat_template ? ctx.chat_template->source() : std::string();
    r.tool_syntax = tool_syntax_of(src);
    r.parse_tools = mode != "none" && !names.empty();
    if (mode == "required" || mode == "named") {
        if (r.params.constraint)
            bad_request("tool_choice", "'tool_choice' that requires a call cannot be combined with 'response_format'.");
        std::vector<std::string> n;
        std::vector<schema::Grammar> p;
        for (size_t i = 0; i < names.size(); ++i)
            if (mode == "required" || names[i] == named) n.push_back(names[i]), p.push_back(params[i]);
        const int64_t vocab = ctx.vocab_size > 0 ? ctx.vocab_size : ctx.tokenizer->vocab_size();
        std::shared_ptr<LazyTokenTrie> lazy =
            ctx.tool_token_trie ? ctx.tool_token_trie : std::make_shared<LazyTokenTrie>(tool_call_markers());
        r.params.constraint = json_constraint_factory(
            std::make_shared<const schema::Automaton>(call_grammar(r.tool_syntax, n, p, k3_thinking(body))),
                                    lazy->get(*ctx.tokenizer, vocab));
    }
    return tools ? *tools : ojson();
}

}  // namespace sluice::api
