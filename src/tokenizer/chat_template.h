// Chat templates rendered the way transformers' apply_chat_template(tokenize=False) renders them: messages are
// normalised (None-valued keys dropped, reasoning fields aliased), special tokens from tokenizer_config.json and
// extra kwargs become template variables, and the template runs in the sandboxed Jinja2 interpreter (jinja_*).
#pragma once

#include <ctime>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/jinja_interp.h"

namespace sluice {

struct ChatRequest {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    nlohmann::ordered_json tools;  // null: no tools (the template sees tools = none)
    bool add_generation_prompt = false;
    nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();  // extra template variables
};

class ChatTemplate {
public:
    // Parses `source`; throws sluice::Error naming the line on a syntax error.
    explicit ChatTemplate(std::string source, jinja::Limits limits = {});

    // Loads DIR/chat_template.jinja, else tokenizer_config.json's chat_template (a string, or a list of named
    // templates: "default", or "tool_use" when `for_tools`), plus the special-token strings of tokenizer_config.json.
    static ChatTemplate from_model_dir(const std::filesystem::path& dir, bool for_tools = false);

    // Renders a conversation (transformers' preprocessing included).
    std::string apply(const ChatRequest& request) const;

    // Renders with exactly these variables (no preprocessing).
    std::string render(const std::map<std::string, jinja::Value>& vars) const;

    // bos_token, eos_token, ... passed to every render (request kwargs override them).
    std::map<std::string, std::string> special_tokens;
    // Clock for strftime_now(); local time when unset.
    std::function<std::tm()> clock;

    const std::string& source() const { return source_; }

private:
    std::string source_;
    jinja::Limits limits_;
    std::shared_ptr<const jinja::Program> program_;
};

// JSON (insertion order kept) to interpreter values.
jinja::Value json_to_value(const nlohmann::ordered_json& j);

// transformers' message preprocessing: drop None-valued keys, then copy the first non-null of reasoning_content /
// thinking / reasoning into both `thinking` and `reasoning_content`. Throws on a message that is not an object.
nlohmann::ordered_json normalize_messages(const nlohmann::ordered_json& messages);

}  // namespace sluice
