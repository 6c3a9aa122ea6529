#include "api/tokenizer_endpoints.h"

#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace sluice::api {

namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

const tok::Tokenizer& tokenizer_of(const ModelContext& ctx) {
    if (!ctx.tokenizer) throw ApiError(500, "server_error", "The server has no tokenizer for this model.");
    return *ctx.tokenizer;
}

void check_object(const ojson& body, std::initializer_list<const char*> known) {
    if (!body.is_object()) bad_request("", "The request body must be a JSON object.");
    for (const auto& [key, v] : body.items()) {
        bool ok = false;
        for (const char* k : known) ok = ok || key == k;
        if (!ok) bad_request(key, cat("Unrecognized request argument supplied: ", key), "unknown_parameter");
    }
    if (const auto it = body.find("model"); it != body.end() && !it->is_null() && !it->is_string())
        bad_request("model", "Invalid type for 'model': expected a string.", "invalid_type");
}

std::optional<bool> get_bool(const ojson& body, const char* key) {
    const auto it = body.find(key);
    if (it == body.end() || it->is_null()) return std::nullopt;
    if (!it->is_boolean()) bad_request(key, cat("Invalid type for '", key, "': expected a boolean."), "invalid_type");
    return it->get<bool>();
}

// A special token's text: tokenizer_config.json's (what the chat template sees), else the id's decoding.
json token_text(const ModelContext& ctx, const char* key, std::optional<int32_t> id) {
    if (ctx.chat_template) {
        const auto& m = ctx.chat_template->special_tokens;
        if (const auto it = m.find(key); it != m.end()) return it->second;
    }
    if (id && *id >= 0 && *id < ctx.tokenizer->vocab_size()) return ctx.tokenizer->decode({*id}, false);
    return nullptr;
}

// The id a special token's text encodes to, when it is one token.
json token_id(const tok::Tokenizer& tok, const json& text) {
    if (!text.is_string()) return nullptr;
    try {
        const std::vector<int32_t> ids = tok.encode(text.get<std::string>(), false);
        return ids.size() == 1 ? json(ids[0]) : json(nullptr);
    } catch (const Error&) {
        return nullptr;
    }
}

}  // namespace

json tokenize_json(const ojson& body, const ModelContext& ctx) {
    const tok::Tokenizer& tok = tokenizer_of(ctx);
    check_object(body, {"content", "prompt", "add_special", "add_special_tokens", "model", "return_token_strs"});
    const bool vllm = body.contains("prompt");
    const char* field = vllm ? "prompt" : "content";
    if (vllm && body.contains("content")) bad_request("content", "Send either 'content' or 'prompt', not both.");
    const auto it = body.find(field);
    if (it == body.end())
        bad_request("prompt", "Missing required parameter: 'prompt' (or 'content').", "missing_required_parameter");
    if (!it->is_string()) bad_request(field, cat("Invalid type for '", field, "': expected a string."), "invalid_type");
    const std::optional<bool> a = get_bool(body, "add_special"), b = get_bool(body, "add_special_tokens");
    if (a && b && *a != *b) bad_request("add_special_tokens", "'add_special' and 'add_special_tokens' disagree.");
    const bool add_special = a.value_or(b.value_or(vllm));
    std::vector<int32_t> ids;
    try {
        ids = tok.encode(it->get<std::string>(), add_special);
    } catch (const Error& e) {
        bad_request(field, cat("The text could not be tokenized: ", e.what()));
    }
    json out = {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", ctx.max_context_tokens}};
    if (get_bool(body, "return_token_strs").value_or(false)) {
        json strs = json::array();
        for (int32_t id : ids) strs.push_back(tok.decode({id}, false));
        out["token_strs"] = std::move(strs);
    }
    return out;
}

json detokenize_json(const ojson& body, const ModelContext& ctx) {
    const tok::Tokenizer& tok = tokenizer_of(ctx);
    check_object(body, {"tokens", "model"});
    const auto it = body.find("tokens");
    if (it == body.end() || !it->is_array())
        bad_request("tokens", "'tokens' must be an array of token ids.",
                    it == body.end() ? "missing_required_parameter" : "invalid_type");
    std::vector<int32_t> ids;
    for (size_t i = 0; i < it->size(); ++i) {
        const ojson& t = (*it)[i];
        const bool in = t.is_number_unsigned()
                            ? t.get<uint64_t>() < uint64_t(tok.vocab_size())
                            : t.is_number_integer() && t.get<int64_t>() >= 0 && t.get<int64_t>() < tok.vocab_size();
        if (!in)
            bad_request(cat("tokens[", i, "]"), cat("tokens[", i, "] is not a token id below ", tok.vocab_size(), "."));
        ids.push_back(int32_t(t.get<int64_t>()));
    }
    const std::string text = tok.decode(ids, false);
    return {{"content", text}, {"prompt", text}};
}

json tokenizer_info_json(const ModelContext& ctx) {
    const tok::Tokenizer& tok = tokenizer_of(ctx);
    json info = {{"tokenizer_class", "sluice"},
                 {"model_max_length", ctx.max_context_tokens},
                 {"vocab_size", tok.vocab_size()},
                 {"chat_template", ctx.chat_template ? json(ctx.chat_template->source()) : json(nullptr)}};
    for (const auto& [key, id] : {std::pair{"bos_token", tok.bos_id()}, std::pair{"eos_token", tok.eos_id()},
                                  std::pair{"pad_token", std::optional<int32_t>()}}) {
        info[key] = token_text(ctx, key, id);
        info[std::string(key) + "_id"] = token_id(tok, info[key]);
    }
    return info;
}

}  // namespace sluice::api
