// tools and tool_choice on /v1/chat/completions: tool definitions checked (a 400 naming the field, or the path of a
// parameters schema keyword), which calls to parse from the output (tool_calls.h), and for tool_choice "required" or
// a named function a constraint that makes the model write one call in its family's syntax with arguments that
// match the function's parameters (hermes syntax only: Kimi's and gpt-oss's markers are special tokens, which the
// byte-level mask cannot force yet; there those choices are a 400 naming tool_choice).
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

[[noreturn]] void bad(const std::string& param, const std::string& message, const char* code = "invalid_value") {
    throw ApiError(400, "invalid_request_error", message, param, code);
}

bool valid_name(const std::string& n) {
    if (n.empty() || n.size() > 64) return false;
    return std::all_of(n.begin(), n.end(), [](unsigned char c) { return std::isalnum(c) || c == '_' || c == '-'; });
}

// One call in hermes syntax: <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>, NAME one of `names`,
// ARGS an instance of that function's parameters.
schema::Grammar hermes_call(const std::vector<std::string>& names, const std::vector<schema::Grammar>& params) {
    schema::Grammar g;
    g.nodes.emplace_back().kind = schema::SchemaNode::Kind::literals;  // the root: one prefix per function
    const int32_t suffix = int32_t(g.nodes.size());
    g.nodes.emplace_back().kind = schema::SchemaNode::Kind::literals;
    g.nodes[size_t(suffix)].literals = {"}\n</tool_call>"};
    std::vector<std::pair<std::string, int32_t>> prefixes;
    for (size_t i = 0; i < names.size(); ++i) {
        const int32_t args = schema::append_grammar(g, params[i]);
        const int32_t seq = int32_t(g.nodes.size());
        schema::SchemaNode& s = g.nodes.emplace_back();
        s.kind = schema::SchemaNode::Kind::sequence;
        s.parts = {args, suffix};
        prefixes.push_back({"<tool_call>\n{\"name\": \"" + names[i] + "\", \"arguments\": ", seq});
    }
    std::sort(prefixes.begin(), prefixes.end());
    for (auto& [text, seq] : prefixes) {
        g.nodes[0].literals.push_back(text);
        g.nodes[0].then.push_back(seq);
    }
    g.root = 0;
    return g;
}

}  // namespace

ojson parse_tools(const ojson& body, const ModelContext& ctx, ParsedRequest& r) {
    const ojson* tools = nullptr;
    if (auto it = body.find("tools"); it != body.end() && !it->is_null()) tools = &*it;
    std::vector<std::string> names;
    std::vector<schema::Grammar> params;
    if (tools) {
        if (!tools->is_array()) bad("tools", "Invalid type for 'tools': expected an array of tools.", "invalid_type");
        for (size_t i = 0; i < tools->size(); ++i) {
            const ojson& t = (*tools)[i];
            const std::string p = cat("tools[", i, "]");
            if (!t.is_object()) bad(p, cat("Invalid type for '", p, "': expected an object."), "invalid_type");
            for (const auto& [k, v] : t.items())
                if (k != "type" && k != "function") bad(p + "." + k, cat("Unrecognized tool field: ", p, ".", k));
            if (!t.contains("type")) bad(p + ".type", cat("Missing required parameter: '", p, ".type'."));
            if (t["type"] != "function")
                bad(p + ".type", cat("Invalid value for '", p, ".type': only 'function' tools are supported."));
            if (!t.contains("function") || t["function"].is_null())
                bad(p + ".function", cat("Missing required parameter: '", p, ".function'."),
                    "missing_required_parameter");
            const ojson& f = t["function"];
            if (!f.is_object()) bad(p + ".function", cat("Invalid type for '", p, ".function': expected an object."),
                                    "invalid_type");
            for (const auto& [k, v] : f.items()) {
                const std::string fp = p + ".function." + k;
                if (k == "name" || k == "parameters") continue;
                if (k == "description" && !v.is_string() && !v.is_null())
                    bad(fp, cat("Invalid type for '", fp, "': expected a string."), "invalid_type");
                if (k == "strict" && !v.is_boolean() && !v.is_null())
                    bad(fp, cat("Invalid type for '", fp, "': expected a boolean."), "invalid_type");
                if (k != "description" && k != "strict") bad(fp, cat("Unrecognized tool field: ", fp));
            }
            const std::string np = p + ".function.name";
            if (!f.contains("name") || !f["name"].is_string())
                bad(np, cat("Missing or invalid '", np, "': a string is required."), "missing_required_parameter");
            const std::string name = f["name"].get<std::string>();
            if (!valid_name(name))
                bad(np, cat("Invalid '", np, "': '", name, "' (up to 64 letters, digits, '_' or '-')."));
            if (std::find(names.begin(), names.end(), name) != names.end())
                bad(np, cat("Invalid '", np, "': the function '", name, "' is defined twice."));
            const std::string pp = p + ".function.parameters";
            ojson schema = ojson{{"type", "object"}};
            if (f.contains("parameters") && !f["parameters"].is_null()) {
                if (!f["parameters"].is_object())
                    bad(pp, cat("Invalid type for '", pp, "': expected a JSON Schema object."), "invalid_type");
                schema = f["parameters"];
            }
            try {
                params.push_back(schema::compile_schema(schema));
            } catch (const schema::SchemaError& e) {
                const std::string at = e.path.empty() ? pp : pp + "." + e.path;
                bad(at, cat("Invalid schema for function '", name, "': at '", at, "': ", e.what(), "."));
            }
            if (params.back().nodes[size_t(params.back().root)].kind != schema::SchemaNode::Kind::object)
                bad(pp, cat("Invalid '", pp, "': the parameters of a function must be an object schema."));
            names.push_back(name);
        }
    }
    std::string mode = names.empty() ? "none" : "auto", named;
    if (auto it = body.find("tool_choice"); it != body.end() && !it->is_null()) {
        const ojson& c = *it;
        if (c.is_string()) {
            mode = c.get<std::string>();
            if (mode != "none" && mode != "auto" && mode != "required")
                bad("tool_choice", cat("Invalid value for 'tool_choice': '", mode,
                                       "'. Supported values are: 'none', 'auto', 'required' or a named function."));
        } else if (c.is_object() && c.value("type", "") == "function" && c.contains("function") &&
                   c["function"].is_object() && c["function"].contains("name") && c["function"]["name"].is_string()) {
            mode = "named";
            named = c["function"]["name"].get<std::string>();
            if (std::find(names.begin(), names.end(), named) == names.end())
                bad("tool_choice.function.name", cat("Invalid 'tool_choice.function.name': no tool is named '", named,
                                                     "'."));
        } else {
            bad("tool_choice", "Invalid 'tool_choice': expected 'none', 'auto', 'required' or "
                               "{\"type\": \"function\", \"function\": {\"name\": ...}}.");
        }
        if ((mode == "required" || mode == "named") && names.empty())
            bad("tool_choice", "Invalid 'tool_choice': it asks for a tool call but 'tools' defines none.");
    }
    if (auto it = body.find("parallel_tool_calls"); it != body.end() && !it->is_null() && !it->is_boolean())
        bad("parallel_tool_calls", "Invalid type for 'parallel_tool_calls': expected a boolean.", "invalid_type");
    const std::string src = ctx.chat_template ? ctx.chat_template->source() : std::string();
    r.tool_syntax = tool_syntax_of(src);
    r.parse_tools = mode != "none" && !names.empty();
    if (mode == "required" || mode == "named") {
        if (r.params.constraint)
            bad("tool_choice", "'tool_choice' that requires a call cannot be combined with 'response_format'.");
        if (r.tool_syntax != ToolSyntax::hermes)
            bad("tool_choice", cat("'tool_choice' '", mode == "named" ? "a named function" : mode,
                                   "' is not supported for this model's tool-call syntax yet (its markers are special "
                                   "tokens); use 'auto'."),
                "unsupported_parameter");
        std::vector<std::string> n;
        std::vector<schema::Grammar> p;
        for (size_t i = 0; i < names.size(); ++i)
            if (mode == "required" || names[i] == named) n.push_back(names[i]), p.push_back(params[i]);
        const int64_t vocab = ctx.vocab_size > 0 ? ctx.vocab_size : ctx.tokenizer->vocab_size();
        std::shared_ptr<LazyTokenTrie> lazy = ctx.token_trie ? ctx.token_trie : std::make_shared<LazyTokenTrie>();
        r.params.constraint = json_constraint_factory(std::make_shared<const schema::Automaton>(hermes_call(n, p)),
                                                      lazy->get(*ctx.tokenizer, vocab));
    }
    return tools ? *tools : ojson();
}

}  // namespace sluice::api
