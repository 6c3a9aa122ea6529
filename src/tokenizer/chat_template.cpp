// ChatTemplate: loading from a model directory, transformers-compatible preprocessing and rendering.
#include "tokenizer/chat_template.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "tokenizer/jinja_parser.h"

namespace sluice {
namespace {

std::string read_text(const std::filesystem::path& p) {
    std::ifstream f(p, std::ios::binary);
    SLUICE_CHECK(f, "cannot open ", p.string());
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// tokenizer_config.json stores tokens as strings or AddedToken objects {"content": ...}.
std::string token_string(const nlohmann::json& v) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
    return {};
}

}  // namespace

jinja::Value json_to_value(const nlohmann::ordered_json& j) {
    using jinja::Value;
    switch (j.type()) {
        case nlohmann::json::value_t::null: return Value::none();
        case nlohmann::json::value_t::boolean: return Value::boolean(j.get<bool>());
        case nlohmann::json::value_t::number_integer: return Value::integer(j.get<int64_t>());
        case nlohmann::json::value_t::number_unsigned: {
            uint64_t u = j.get<uint64_t>();
            if (u <= static_cast<uint64_t>(INT64_MAX)) return Value::integer(static_cast<int64_t>(u));
            return Value::number(static_cast<double>(u));
        }
        case nlohmann::json::value_t::number_float: return Value::number(j.get<double>());
        case nlohmann::json::value_t::string: return Value::string(j.get<std::string>());
        case nlohmann::json::value_t::array: {
            jinja::List items;
            items.reserve(j.size());
            for (const auto& e : j) items.push_back(json_to_value(e));
            return Value::make_list(std::move(items));
        }
        case nlohmann::json::value_t::object: {
            Value d = Value::make_dict();
            for (const auto& [k, v] : j.items()) d.dict->items.emplace_back(Value::string(k), json_to_value(v));
            return d;
        }
        default: fail("unsupported JSON value in chat input");
    }
}

nlohmann::ordered_json normalize_messages(const nlohmann::ordered_json& messages) {
    SLUICE_CHECK(messages.is_array(), "messages must be a JSON array");
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    size_t index = 0;
    for (const auto& m : messages) {
        SLUICE_CHECK(m.is_object(), "messages[", index, "] must be an object");
        nlohmann::ordered_json kept = nlohmann::ordered_json::object();
        for (const auto& [k, v] : m.items())
            if (!v.is_null()) kept[k] = v;
        const nlohmann::ordered_json* reasoning = nullptr;
        for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
            if (kept.contains(key)) {
                reasoning = &kept[key];
                break;
            }
        }
        if (reasoning) {
            // {"thinking": r, **message, "reasoning_content": r}
            nlohmann::ordered_json r = *reasoning;
            nlohmann::ordered_json aliased = nlohmann::ordered_json::object();
            aliased["thinking"] = r;
            for (const auto& [k, v] : kept.items()) aliased[k] = v;
            aliased["reasoning_content"] = r;
            kept = std::move(aliased);
        }
        out.push_back(std::move(kept));
        ++index;
    }
    return out;
}

ChatTemplate::ChatTemplate(std::string source, jinja::Limits limits)
    : source_(std::move(source)),
      limits_(limits),
      program_(std::make_shared<const jinja::Program>(jinja::parse(source_))) {}

ChatTemplate ChatTemplate::from_model_dir(const std::filesystem::path& dir, bool for_tools) {
    const auto config_path = dir / "tokenizer_config.json";
    nlohmann::json config = nlohmann::json::object();
    if (std::filesystem::exists(config_path)) {
        try {
            config = nlohmann::json::parse(read_text(config_path));
        } catch (const nlohmann::json::exception& e) {
            fail(config_path.string(), ": invalid JSON: ", e.what());
        }
        SLUICE_CHECK(config.is_object(), config_path.string(), ": expected a JSON object");
    }
    std::string source;
    const auto jinja_path = dir / "chat_template.jinja";
    if (std::filesystem::exists(jinja_path)) {
        source = read_text(jinja_path);
    } else {
        SLUICE_CHECK(config.contains("chat_template"), "no chat template in ", dir.string(),
                     " (neither chat_template.jinja nor tokenizer_config.json field 'chat_template')");
        const auto& t = config["chat_template"];
        if (t.is_string()) {
            source = t.get<std::string>();
        } else {
            SLUICE_CHECK(t.is_array(), config_path.string(), ": 'chat_template' must be a string or a list");
            std::map<std::string, std::string> named;
            for (const auto& entry : t) {
                SLUICE_CHECK(entry.is_object() && entry.contains("name") && entry.contains("template") &&
                                 entry["name"].is_string() && entry["template"].is_string(),
                             config_path.string(), ": 'chat_template' list entries need string 'name' and 'template'");
                named[entry["name"].get<std::string>()] = entry["template"].get<std::string>();
            }
            std::string want = for_tools && named.count("tool_use") ? "tool_use" : "default";
            SLUICE_CHECK(named.count(want), config_path.string(), ": no chat template named '", want, "'");
            source = named[want];
        }
    }
    ChatTemplate tpl(std::move(source));
    for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                            "mask_token"}) {
        if (config.contains(key)) {
            std::string s = token_string(config[key]);
            if (!s.empty()) tpl.special_tokens[key] = s;
        }
    }
    return tpl;
}

std::string ChatTemplate::render(const std::map<std::string, jinja::Value>& vars) const {
    jinja::Interpreter interp(*program_, limits_);
    if (clock) interp.now = clock;
    return interp.render(vars);
}

std::string ChatTemplate::apply(const ChatRequest& request) const {
    SLUICE_CHECK(request.kwargs.is_object(), "template kwargs must be a JSON object");
    SLUICE_CHECK(request.tools.is_null() || request.tools.is_array(), "tools must be a JSON array");
    std::map<std::string, jinja::Value> vars;
    for (const auto& [k, v] : special_tokens) vars[k] = jinja::Value::string(v);
    for (const auto& [k, v] : request.kwargs.items()) {
        SLUICE_CHECK(k != "messages" && k != "tools" && k != "documents" && k != "add_generation_prompt",
                     "template kwarg '", k, "' collides with a reserved variable");
        vars[k] = json_to_value(v);
    }
    vars["messages"] = json_to_value(normalize_messages(request.messages));
    vars["tools"] = json_to_value(request.tools);
    vars["documents"] = jinja::Value::none();
    vars["add_generation_prompt"] = jinja::Value::boolean(request.add_generation_prompt);
    return render(vars);
}

}  // namespace sluice
