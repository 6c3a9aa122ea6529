// Response side of the OpenAI protocol (see openai_protocol.h): generated ids to text with stop sequences, logprob
// entries, and the JSON bodies and stream chunks of /v1/chat/completions and /v1/completions.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>

#include "api/openai_protocol.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace sluice::api {

using json = nlohmann::json;

ApiError::ApiError(int status, std::string type, std::string message, std::string param, std::string code)
    : std::runtime_error(std::move(message)),
      status(status),
      type(std::move(type)),
      param(std::move(param)),
      code(std::move(code)) {}

json error_json(const ApiError& e) {
    return {{"error",
             {{"message", e.what()},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
}

namespace {

// Returns the text of `held` that can be sent: everything before the earliest stop sequence (then `stopped` is set
// and held is emptied), else all but the longest suffix that could still grow into a stop (none when `final`).
// Text released earlier never holds the start of a stop: it was kept back while it could be one.
std::string release(std::string& held, const std::vector<std::string>& stops, bool& stopped, bool final) {
    size_t first = std::string::npos;
    for (const auto& s : stops) first = std::min(first, held.find(s));
    if (first != std::string::npos) {
        std::string out = held.substr(0, first);
        held.clear();
        stopped = true;
        return out;
    }
    size_t keep = 0;
    if (!final)
        for (const auto& s : stops)
            for (size_t k = std::min(s.size() - 1, held.size()); k > keep; --k)
                if (held.compare(held.size() - k, k, s, 0, k) == 0) {
                    keep = k;
                    break;
                }
    std::string out = held.substr(0, held.size() - keep);
    held.erase(0, held.size() - keep);
    return out;
}

// NaN sorts and sums as -inf, so a broken row cannot break the ordering.
double logit_at(std::span<const float> logits, size_t i) {
    const double v = logits[i];
    return std::isnan(v) ? -std::numeric_limits<double>::infinity() : v;
}

double log_sum_exp(std::span<const float> logits) {
    double mx = -std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < logits.size(); ++i) mx = std::max(mx, logit_at(logits, i));
    if (!std::isfinite(mx)) return mx;
    double sum = 0;
    for (size_t i = 0; i < logits.size(); ++i) sum += std::exp(logit_at(logits, i) - mx);
    return mx + std::log(sum);
}

// {token, logprob, bytes} of one id.
json token_logprob(const tok::Tokenizer& tok, int32_t id, std::span<const float> logits, double lse) {
    std::string raw;
    if (id >= 0 && id < tok.vocab_size()) raw = tok.decode_bytes({id}, false);
    json bytes = json::array();
    for (unsigned char c : raw) bytes.push_back(int(c));
    double lp = id >= 0 && size_t(id) < logits.size() ? logit_at(logits, size_t(id)) - lse : -9999.0;
    if (!std::isfinite(lp)) lp = -9999.0;
    return {{"token", id >= 0 && id < tok.vocab_size() ? tok.decode({id}, false) : std::string()},
            {"logprob", lp},
            {"bytes", std::move(bytes)}};
}

}  // namespace

ChoiceText::ChoiceText(const tok::Tokenizer& tok, std::vector<std::string> stop)
    : tok_(&tok), dec_(std::make_unique<tok::StreamDecoder>(tok, true)), stop_(std::move(stop)) {
    std::erase_if(stop_, [](const std::string& s) { return s.empty(); });
}
ChoiceText::ChoiceText(ChoiceText&&) noexcept = default;
ChoiceText& ChoiceText::operator=(ChoiceText&&) noexcept = default;
ChoiceText::~ChoiceText() = default;

std::string ChoiceText::push(int32_t id) {
    if (stopped_) return {};
    // ids past the tokenizer's vocabulary (padding rows of the embedding) decode to nothing, as in HF
    if (id >= 0 && id < tok_->vocab_size() && std::find(kept_.begin(), kept_.end(), id) != kept_.end()) {
        held_ += dec_->finish();  // a marker ends any partial character before it
        held_ += tok_->decode_bytes({id}, false);
        raw_bytes_ += tok_->decode_bytes({id}, false).size();
    } else if (id >= 0 && id < tok_->vocab_size()) {
        held_ += dec_->push(id);
        raw_bytes_ += tok_->decode_bytes({id}, false).size();
    }
    std::string out = release(held_, stop_, stopped_, false);
    text_ += out;
    return out;
}

std::string ChoiceText::finish() {
    if (stopped_) return {};
    held_ += dec_->finish();
    std::string out = release(held_, stop_, stopped_, true);
    text_ += out;
    return out;
}

json first_prompt_entry(const tok::Tokenizer& tok, int32_t id) {
    json entry = token_logprob(tok, id, {}, 0);
    entry["logprob"] = nullptr;
    entry["top_logprobs"] = nullptr;
    return entry;
}

json chat_logprob_entry(const tok::Tokenizer& tok, int32_t id, std::span<const float> logits, int top_n) {
    const double lse = log_sum_exp(logits);
    json entry = token_logprob(tok, id, logits, lse);
    const size_t n = std::min(size_t(std::clamp(top_n, 0, 20)), logits.size());
    std::vector<int32_t> idx(logits.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + ptrdiff_t(n), idx.end(), [&](int32_t a, int32_t b) {
        const double la = logit_at(logits, size_t(a)), lb = logit_at(logits, size_t(b));
        return la > lb || (la == lb && a < b);
    });
    json top = json::array();
    for (size_t i = 0; i < n; ++i) top.push_back(token_logprob(tok, idx[i], logits, lse));
    entry["top_logprobs"] = std::move(top);
    return entry;
}

json logprobs_object(const ParsedRequest& req, const json& entries, size_t text_offset) {
    const json list = entries.is_array() ? entries : json::array();
    if (req.endpoint == Endpoint::chat_completions) return {{"content", list}, {"refusal", nullptr}};
    json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
    size_t offset = text_offset;
    for (const json& e : list) {
        const std::string token = e.value("token", std::string());
        const json lp = e.value("logprob", json(-9999.0));
        tokens.push_back(token);
        lps.push_back(lp);
        if (lp.is_null()) {  // an echoed prompt's first token: nothing predicts it
            tops.push_back(nullptr);
        } else {
            json top = json::object();
            if (auto it = e.find("top_logprobs"); it != e.end() && it->is_array())
                for (const json& t : *it)
                    top.emplace(t.value("token", std::string()), t.value("logprob", json(-9999.0)));
            top.emplace(token, lp);  // the chosen token is always listed
            tops.push_back(std::move(top));
        }
        offsets.push_back(offset);
        if (auto it = e.find("bytes"); it != e.end() && it->is_array()) offset += it->size();
    }
    return {{"tokens", std::move(tokens)},
            {"token_logprobs", std::move(lps)},
            {"top_logprobs", std::move(tops)},
            {"text_offset", std::move(offsets)}};
}

json usage_json(const Usage& u) {
    return {{"prompt_tokens", u.prompt_tokens},
            {"completion_tokens", u.completion_tokens},
            {"total_tokens", u.prompt_tokens + u.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

namespace {

json finish_json(const std::string& reason) { return reason.empty() ? json(nullptr) : json(reason); }

json envelope(const ParsedRequest& req, const std::string& id, int64_t created, const char* object, json choices) {
    return {
        {"id", id}, {"object", object}, {"created", created}, {"model", req.model}, {"choices", std::move(choices)}};
}

}  // namespace

json completion_json(const ParsedRequest& req, const std::string& id, int64_t created,
                     const std::vector<ChoiceResult>& choices, const Usage& usage) {
    const bool chat = req.endpoint == Endpoint::chat_completions;
    json list = json::array();
    for (size_t i = 0; i < choices.size(); ++i) {
        const ChoiceResult& c = choices[i];
        json choice = {{"index", i}, {"logprobs", c.logprobs}, {"finish_reason", finish_json(c.finish_reason)}};
        if (chat && !c.tool_calls.empty())
            choice["message"] = {{"role", "assistant"},
                                 {"content", c.text.empty() ? json(nullptr) : json(c.text)},
                                 {"tool_calls", tool_calls_json(c.tool_calls)}};
        else if (chat)
            choice["message"] = {{"role", "assistant"}, {"content", c.text}};
        else
            choice["text"] = c.text;
        list.push_back(std::move(choice));
    }
    json body = envelope(req, id, created, chat ? "chat.completion" : "text_completion", std::move(list));
    body["usage"] = usage_json(usage);
    return body;
}

json chunk_json(const ParsedRequest& req, const std::string& id, int64_t created, int index,
                const std::string& delta_text, const std::string& finish_reason, bool role_first,
                const json& logprobs) {
    const bool chat = req.endpoint == Endpoint::chat_completions;
    json choice = {{"index", index}, {"logprobs", logprobs}, {"finish_reason", finish_json(finish_reason)}};
    if (chat) {
        json delta = json::object();
        if (role_first) delta["role"] = "assistant";
        if (role_first || !delta_text.empty() || finish_reason.empty()) delta["content"] = delta_text;
        choice["delta"] = std::move(delta);
    } else {
        choice["text"] = delta_text;
    }
    json body = envelope(req, id, created, chat ? "chat.completion.chunk" : "text_completion",
                         json::array({std::move(choice)}));
    if (req.include_usage) body["usage"] = nullptr;
    return body;
}

std::vector<json> tool_call_chunks(const ParsedRequest& req, const std::string& id, int64_t created, int index,
                                   const std::vector<CallDelta>& calls) {
    std::vector<json> out;
    const auto chunk = [&](json call) {
        json choice = {{"index", index},
                       {"logprobs", nullptr},
                       {"finish_reason", nullptr},
                       {"delta", {{"tool_calls", json::array({std::move(call)})}}}};
        json body = envelope(req, id, created, "chat.completion.chunk", json::array({std::move(choice)}));
        if (req.include_usage) body["usage"] = nullptr;
        out.push_back(std::move(body));
    };
    for (const CallDelta& c : calls) {
        if (c.first)
            chunk({{"index", c.index}, {"id", c.id}, {"type", "function"},
                   {"function", {{"name", c.name}, {"arguments", ""}}}});
        if (!c.arguments.empty()) chunk({{"index", c.index}, {"function", {{"arguments", c.arguments}}}});
    }
    return out;
}

void ChoiceResult::add(const std::vector<CallDelta>& deltas) {
    for (const CallDelta& c : deltas) {
        if (c.first) tool_calls.push_back({c.id, c.name, ""});
        if (c.index < tool_calls.size()) tool_calls[c.index].arguments += c.arguments;
    }
}

json usage_chunk_json(const ParsedRequest& req, const std::string& id, int64_t created, const Usage& u) {
    const bool chat = req.endpoint == Endpoint::chat_completions;
    json body = envelope(req, id, created, chat ? "chat.completion.chunk" : "text_completion", json::array());
    body["usage"] = usage_json(u);
    return body;
}

std::string new_completion_id(Endpoint endpoint) {
    thread_local std::mt19937_64 rng([] {
        std::random_device rd;
        return (uint64_t(rd()) << 32) | rd();
    }());
    char hex[32];
    std::snprintf(hex, sizeof hex, "%012llx%012llx", (unsigned long long)(rng() >> 16),
                  (unsigned long long)(rng() >> 16));
    return (endpoint == Endpoint::chat_completions ? "chatcmpl-" : "cmpl-") + std::string(hex);
}

}  // namespace sluice::api
