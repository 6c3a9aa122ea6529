// Request validation for the OpenAI endpoints (see openai_protocol.h): a body becomes RequestParams only through
// the checks here, and every problem is an ApiError naming the field by its path ("messages[2].content[0].type").
// Cheap structural checks run first; the chat template and the tokenizer run last, on validated input.
#include <algorithm>
#include <climits>
#include <cmath>
#include <random>
#include <set>
#include <string_view>
#include <utility>

#include "api/openai_protocol.h"
#include "api/turn_boundaries.h"
#include "core/error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace sluice::api {

namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

constexpr int k_max_depth = 64;            // nesting anywhere in a body
constexpr size_t k_max_stop_bytes = 1024;  // one stop sequence
constexpr int k_max_stops = 4;

[[noreturn]] void bad(const std::string& param, const std::string& message, const std::string& code = {}) {
    throw ApiError(400, "invalid_request_error", message, param, code);
}

const char* type_name(const ojson& j) {
    switch (j.type()) {
        case ojson::value_t::null:
            return "null";
        case ojson::value_t::boolean:
            return "a boolean";
        case ojson::value_t::number_integer:
        case ojson::value_t::number_unsigned:
            return "an integer";
        case ojson::value_t::number_float:
            return "a decimal";
        case ojson::value_t::string:
            return "a string";
        case ojson::value_t::array:
            return "an array";
        case ojson::value_t::object:
            return "an object";
        default:
            return "an unsupported value";
    }
}

[[noreturn]] void bad_type(const std::string& param, const char* expected, const ojson& got) {
    bad(param, cat("Invalid type for '", param, "': expected ", expected, ", but got ", type_name(got), " instead."),
        "invalid_type");
}

[[noreturn]] void bad_missing(const std::string& param) {
    bad(param, cat("Missing required parameter: '", param, "'."), "missing_required_parameter");
}

[[noreturn]] void not_supported(const std::string& param, const std::string& what) {
    bad(param, cat("'", param, "' ", what), "unsupported_parameter");
}

int64_t get_int(const ojson& j, const std::string& param, int64_t lo, int64_t hi) {
    bool ok = false;
    int64_t v = 0;
    std::string shown;
    if (j.is_number_unsigned()) {
        const uint64_t u = j.get<uint64_t>();
        ok = u <= uint64_t(INT64_MAX) && int64_t(u) >= lo && int64_t(u) <= hi;
        v = ok ? int64_t(u) : 0;
        shown = std::to_string(u);
    } else if (j.is_number_integer()) {
        v = j.get<int64_t>();
        ok = v >= lo && v <= hi;
        shown = std::to_string(v);
    } else {
        bad_type(param, "an integer", j);
    }
    if (!ok) {
        const std::string range = hi == INT64_MAX ? cat(">= ", lo) : cat("from ", lo, " to ", hi);
        bad(param, cat("Invalid '", param, "': expected an integer ", range, ", but got ", shown, " instead."),
            "invalid_value");
    }
    return v;
}

double get_number(const ojson& j, const std::string& param, double lo, double hi, bool lo_open = false) {
    if (!j.is_number()) bad_type(param, "a number", j);
    const double v = j.get<double>();
    if (!std::isfinite(v) || v < lo || v > hi || (lo_open && v == lo))
        bad(param,
            cat("Invalid '", param, "': expected a number in ", lo_open ? "(" : "[", lo, ", ", hi, "], but got ",
                j.dump(), " instead."),
            "invalid_value");
    return v;
}

bool get_bool(const ojson& j, const std::string& param) {
    if (!j.is_boolean()) bad_type(param, "a boolean", j);
    return j.get<bool>();
}

const std::string& get_string(const ojson& j, const std::string& param) {
    if (!j.is_string()) bad_type(param, "a string", j);
    return j.get_ref<const std::string&>();
}

// The field's value, or null when it is absent or null (null counts as absent).
const ojson* field(const ojson& body, const char* name) {
    auto it = body.find(name);
    return it == body.end() || it->is_null() ? nullptr : &*it;
}

// Nesting depth check without recursion (bodies may nest thousands deep).
template <typename J>
void check_depth(const J& root, const std::string& param = {}) {
    std::vector<std::pair<const J*, int>> stack{{&root, 1}};
    while (!stack.empty()) {
        auto [j, d] = stack.back();
        stack.pop_back();
        if (!j->is_structured()) continue;
        if (d > k_max_depth)
            bad(param, cat(param.empty() ? "The request body" : "'" + param + "'", " is nested deeper than ",
                           k_max_depth, " levels."));
        for (const auto& child : *j) stack.emplace_back(&child, d + 1);
    }
}

// Depth-checked input, so this recursion is bounded.
ojson to_ordered(const json& j) {
    switch (j.type()) {
        case json::value_t::object: {
            ojson o = ojson::object();
            for (const auto& [k, v] : j.items()) o[k] = to_ordered(v);
            return o;
        }
        case json::value_t::array: {
            ojson a = ojson::array();
            for (const auto& v : j) a.push_back(to_ordered(v));
            return a;
        }
        case json::value_t::null:
            return nullptr;
        case json::value_t::boolean:
            return j.get<bool>();
        case json::value_t::number_integer:
            return j.get<int64_t>();
        case json::value_t::number_unsigned:
            return j.get<uint64_t>();
        case json::value_t::number_float:
            return j.get<double>();
        case json::value_t::string:
            return j.get_ref<const std::string&>();
        default:
            return nullptr;  // binary / discarded: not produced by the parser
    }
}

const std::set<std::string, std::less<>> k_common = {"model",
                                                     "max_tokens",
                                                     "max_completion_tokens",
                                                     "temperature",
                                                     "top_p",
                                                     "top_k",
                                                     "min_p",
                                                     "seed",
                                                     "n",
                                                     "stop",
                                                     "stream",
                                                     "stream_options",
                                                     "logprobs",
                                                     "logit_bias",
                                                     "frequency_penalty",
                                                     "presence_penalty",
                                                     "ignore_eos",
                                                     "speculative",
                                                     "response_format"};
const std::set<std::string, std::less<>> k_chat = {
    "messages", "top_logprobs", "tools", "tool_choice", "chat_template_kwargs", "reasoning_effort", "modalities"};
const std::set<std::string, std::less<>> k_completions = {"prompt", "echo", "suffix", "best_of"};
// Known, harmless, and without effect here: accepted and reported in ignored_fields.
const std::set<std::string, std::less<>> k_ignored = {"user",         "metadata",          "store",
                                                      "service_tier", "safety_identifier", "prompt_cache_key"};
const std::set<std::string, std::less<>> k_chat_ignored = {"parallel_tool_calls", "verbosity"};
// Known OpenAI chat fields we cannot honour: a 400 rather than a silently different answer.
const std::set<std::string, std::less<>> k_chat_unsupported = {"functions", "function_call", "audio", "prediction",
                                                               "web_search_options"};

const std::set<std::string, std::less<>> k_roles = {"system", "developer", "user", "assistant", "tool"};

// A tool call's `arguments` is a JSON string in the API; templates expect the object (as vLLM hands them).
void normalize_tool_calls(ojson& calls, const std::string& path) {
    if (!calls.is_array()) bad_type(path, "an array", calls);
    for (size_t k = 0; k < calls.size(); ++k) {
        ojson& c = calls[k];
        const std::string p = cat(path, "[", k, "]");
        if (!c.is_object()) bad_type(p, "an object", c);
        auto f = c.find("function");
        if (f == c.end()) continue;
        if (!f->is_object()) bad_type(p + ".function", "an object", *f);
        auto name = f->find("name");
        if (name != f->end() && !name->is_string()) bad_type(p + ".function.name", "a string", *name);
        auto args = f->find("arguments");
        if (args == f->end() || !args->is_string()) continue;
        ojson parsed = ojson::parse(args->get_ref<const std::string&>(), nullptr, false);
        if (parsed.is_object()) {
            check_depth(parsed, p + ".function.arguments");
            *args = std::move(parsed);
        }
    }
}

ojson build_messages(const ojson& msgs, bool template_knows_developer) {
    if (!msgs.is_array()) bad_type("messages", "an array", msgs);
    if (msgs.empty())
        bad("messages", "Invalid 'messages': empty array. Expected an array with at least one message.", "empty_array");
    ojson out = ojson::array();
    for (size_t i = 0; i < msgs.size(); ++i) {
        const ojson& m = msgs[i];
        const std::string path = cat("messages[", i, "]");
        if (!m.is_object()) bad_type(path, "an object", m);
        ojson msg = ojson::object();
        const ojson* role_j = field(m, "role");
        if (!role_j) bad_missing(path + ".role");
        std::string role = get_string(*role_j, path + ".role");
        if (!k_roles.count(role))
            bad(path + ".role",
                cat("Invalid value for '", path, ".role': '", role,
                    "'. Supported values are: 'system', 'developer', 'user', 'assistant', and 'tool'."),
                "invalid_value");
        if (role == "developer" && !template_knows_developer) role = "system";
        msg["role"] = role;
        for (const auto& [key, v] : m.items()) {
            const std::string p = cat(path, ".", key);
            if (key == "role") continue;
            if (key == "content") {
                if (v.is_null()) {
                    msg["content"] = nullptr;
                } else if (v.is_string()) {
                    msg["content"] = v;
                } else if (v.is_array()) {
                    std::string text;
                    for (size_t j = 0; j < v.size(); ++j) {
                        const ojson& part = v[j];
                        const std::string pp = cat(p, "[", j, "]");
                        if (!part.is_object()) bad_type(pp, "an object", part);
                        const ojson* type = field(part, "type");
                        if (!type) bad_missing(pp + ".type");
                        if (get_string(*type, pp + ".type") != "text")
                            bad(pp + ".type",
                                cat("Unsupported content part type '", type->get_ref<const std::string&>(), "' in '",
                                    pp, "': this server supports only text parts."),
                                "invalid_value");
                        const ojson* t = field(part, "text");
                        if (!t) bad_missing(pp + ".text");
                        if (j > 0) text += '\n';
                        text += get_string(*t, pp + ".text");
                    }
                    msg["content"] = std::move(text);
                } else {
                    bad_type(p, "a string, an array of content parts or null", v);
                }
            } else if (key == "name" || key == "tool_call_id") {
                if (!v.is_null()) msg[key] = get_string(v, p);
            } else if (key == "reasoning_content" || key == "reasoning" || key == "thinking" || key == "refusal") {
                if (!v.is_null() && !v.is_string()) bad_type(p, "a string or null", v);
                msg[key] = v;
            } else if (key == "tool_calls") {
                if (v.is_null()) continue;
                ojson calls = v;
                normalize_tool_calls(calls, p);
                msg["tool_calls"] = std::move(calls);
            } else {
                bad(p, cat("Unrecognized message field '", key, "' in '", path, "'."), "unknown_parameter");
            }
        }
        const bool has_content = msg.contains("content") && !msg["content"].is_null();
        if (!has_content && role != "assistant") bad_missing(path + ".content");
        // An assistant turn without content (tool calls only) reaches the template as "" (as vLLM hands it):
        // templates concatenate and search message.content, which fails on none.
        if (!has_content) msg["content"] = "";
        out.push_back(std::move(msg));
    }
    return out;
}

void parse_stop(const ojson& v, std::vector<std::string>& out) {
    auto one = [&](const ojson& s, const std::string& p) {
        const std::string& str = get_string(s, p);
        if (str.empty()) bad(p, cat("Invalid '", p, "': a stop sequence must not be empty."), "invalid_value");
        if (str.size() > k_max_stop_bytes)
            bad(p, cat("Invalid '", p, "': a stop sequence may be at most ", k_max_stop_bytes, " bytes."),
                "invalid_value");
        out.push_back(str);
    };
    if (v.is_string()) return one(v, "stop");
    if (!v.is_array()) bad_type("stop", "a string or an array of strings", v);
    if (v.size() > size_t(k_max_stops))
        bad("stop", cat("Invalid 'stop': at most ", k_max_stops, " stop sequences are allowed, got ", v.size(), "."),
            "invalid_value");
    for (size_t i = 0; i < v.size(); ++i) one(v[i], cat("stop[", i, "]"));
}

void parse_logit_bias(const ojson& v, int64_t vocab, std::map<int32_t, float>& out) {
    if (!v.is_object()) bad_type("logit_bias", "an object mapping token ids to numbers", v);
    for (const auto& [key, val] : v.items()) {
        const bool digits = !key.empty() && key.size() <= 18 &&
                            std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
        const bool negative = key.size() >= 2 && key[0] == '-' && key.size() <= 19 &&
                              std::all_of(key.begin() + 1, key.end(), [](char c) { return c >= '0' && c <= '9'; });
        if (!digits && !negative)
            bad("logit_bias", cat("Invalid key '", key, "' in 'logit_bias': expected a token id (a decimal integer)."),
                "invalid_value");
        const int64_t id = std::stoll(key);
        if (id < 0 || id >= vocab)
            bad("logit_bias",
                cat("Invalid key '", key, "' in 'logit_bias': token id outside the vocabulary (0 to ", vocab - 1, ")."),
                "invalid_value");
        out[int32_t(id)] = float(get_number(val, "logit_bias." + key, -100, 100));
    }
}

std::vector<int32_t> parse_ids(const ojson& a, const std::string& path, int64_t vocab) {
    std::vector<int32_t> ids;
    ids.reserve(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
        const std::string p = cat(path, "[", i, "]");
        const ojson& v = a[i];
        if (!v.is_number_integer()) bad_type(p, "an integer token id", v);
        const bool in = v.is_number_unsigned() ? v.get<uint64_t>() < uint64_t(vocab)
                                               : v.get<int64_t>() >= 0 && v.get<int64_t>() < vocab;
        if (!in)
            bad(p,
                cat("Invalid token id ", v.dump(), " in '", p, "': the vocabulary has ", vocab, " tokens (ids 0 to ",
                    vocab - 1, ")."),
                "invalid_value");
        ids.push_back(int32_t(v.get<int64_t>()));
    }
    return ids;
}

// The prompt field of /v1/completions: one prompt (a string or an array of ids) or an array of prompts (strings or
// id arrays, one kind). Each prompt is its ids, or empty ids and its text (encoded later).
struct PromptIn {
    std::vector<int32_t> ids;
    std::optional<std::string> text;
};

// Token prompts echo as generated text reads: special tokens skipped, ids past the tokenizer's vocabulary (padding
// rows of the embedding) as nothing.
std::string echo_text(const tok::Tokenizer& tok, std::vector<int32_t> ids) {
    std::erase_if(ids, [&](int32_t id) { return id >= tok.vocab_size(); });
    return tok.decode(ids, true);
}

std::vector<PromptIn> parse_prompts(const ojson& p, int64_t vocab) {
    const char* what = "a string, an array of token ids, or an array of strings or of token-id arrays";
    if (p.is_string()) return {PromptIn{{}, p.get<std::string>()}};
    if (!p.is_array()) bad_type("prompt", what, p);
    if (p.empty()) bad("prompt", "Invalid 'prompt': the prompt is empty.", "invalid_value");
    if (p[0].is_number()) return {PromptIn{parse_ids(p, "prompt", vocab), std::nullopt}};
    if (!p[0].is_string() && !p[0].is_array()) bad_type("prompt[0]", what, p[0]);
    if (p.size() > size_t(k_max_prompts))
        bad("prompt", cat("Invalid 'prompt': at most ", k_max_prompts, " prompts per request, got ", p.size(), "."),
            "invalid_value");
    std::vector<PromptIn> out;
    for (size_t i = 0; i < p.size(); ++i) {
        const std::string path = cat("prompt[", i, "]");
        if (p[0].is_string()) {
            if (!p[i].is_string()) bad_type(path, "a string (as prompt[0] is)", p[i]);
            out.push_back({{}, p[i].get<std::string>()});
        } else {
            if (!p[i].is_array()) bad_type(path, "an array of token ids (as prompt[0] is)", p[i]);
            if (p[i].empty()) bad(path, cat("Invalid '", path, "': the prompt is empty."), "invalid_value");
            out.push_back({parse_ids(p[i], path, vocab), std::nullopt});
        }
    }
    return out;
}

ParsedRequest parse_impl(Endpoint endpoint, const ojson& body, const ModelContext& ctx) {
    if (!ctx.tokenizer || ctx.max_context_tokens <= 0)
        throw ApiError(500, "server_error", "The server has no tokenizer or context size for this model.");
    if (!body.is_object()) bad("", cat("The request body must be a JSON object, got ", type_name(body), "."));
    check_depth(body);
    const bool chat = endpoint == Endpoint::chat_completions;
    const tok::Tokenizer& tok = *ctx.tokenizer;
    const int64_t vocab = ctx.vocab_size > 0 ? ctx.vocab_size : tok.vocab_size();

    ParsedRequest r;
    r.endpoint = endpoint;
    for (const auto& [key, v] : body.items()) {
        if (k_common.count(key) || (chat ? k_chat : k_completions).count(key)) continue;
        if (k_ignored.count(key) || (chat && k_chat_ignored.count(key))) {
            r.ignored_fields.push_back(key);
            continue;
        }
        if (chat && k_chat_unsupported.count(key)) {
            if (v.is_null()) continue;
            not_supported(key, key.rfind("function", 0) == 0 ? "is not supported by this server; use 'tools'."
                                                             : "is not supported by this server.");
        }
        bad(key, cat("Unrecognized request argument supplied: ", key), "unknown_parameter");
    }

    const ojson* model = field(body, "model");
    if (!model) bad_missing("model");
    r.model = get_string(*model, "model");

    RequestParams& q = r.params;
    std::optional<int64_t> max_tokens;
    // completions may ask for no tokens (max_tokens 0: the prompt alone runs, to be scored with echo)
    if (const ojson* v = field(body, "max_tokens")) max_tokens = get_int(*v, "max_tokens", chat ? 1 : 0, INT64_MAX);
    if (const ojson* v = field(body, "max_completion_tokens"))
        max_tokens = get_int(*v, "max_completion_tokens", chat ? 1 : 0, INT64_MAX);

    q.sampling.temperature = 1.0f;
    if (const ojson* v = field(body, "temperature"))
        q.sampling.temperature = float(get_number(*v, "temperature", 0, 2));
    if (const ojson* v = field(body, "top_p")) q.sampling.top_p = float(get_number(*v, "top_p", 0, 1, true));
    if (const ojson* v = field(body, "top_k")) q.sampling.top_k = get_int(*v, "top_k", 0, INT64_MAX);
    if (const ojson* v = field(body, "min_p")) q.sampling.min_p = float(get_number(*v, "min_p", 0, 1));
    if (const ojson* v = field(body, "seed")) {
        q.sampling.seed = uint64_t(get_int(*v, "seed", INT64_MIN, INT64_MAX));
    } else {
        std::random_device rd;
        q.sampling.seed = ((uint64_t(rd()) << 32) | rd()) & uint64_t(INT64_MAX);
    }
    if (const ojson* v = field(body, "n")) r.n = int(get_int(*v, "n", 1, 128));
    if (const ojson* v = field(body, "stop")) parse_stop(*v, r.stop);
    if (const ojson* v = field(body, "stream")) r.stream = get_bool(*v, "stream");
    if (const ojson* v = field(body, "stream_options")) {
        if (!r.stream)
            bad("stream_options", "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                "invalid_value");
        if (!v->is_object()) bad_type("stream_options", "an object", *v);
        for (const auto& [key, o] : v->items()) {
            const std::string p = "stream_options." + key;
            if (o.is_null()) continue;
            if (key == "include_usage") {
                r.include_usage = get_bool(o, p);
            } else if (key == "include_obfuscation") {
                get_bool(o, p);
                r.ignored_fields.push_back(p);
            } else {
                bad(p, cat("Unrecognized request argument supplied: ", p), "unknown_parameter");
            }
        }
    }
    if (const ojson* v = field(body, "frequency_penalty"))
        q.frequency_penalty = float(get_number(*v, "frequency_penalty", -2, 2));
    if (const ojson* v = field(body, "presence_penalty"))
        q.presence_penalty = float(get_number(*v, "presence_penalty", -2, 2));
    if (const ojson* v = field(body, "logit_bias")) parse_logit_bias(*v, vocab, q.logit_bias);
    if (const ojson* v = field(body, "ignore_eos")) q.stop_at_eos = !get_bool(*v, "ignore_eos");
    {
        const ojson* v = field(body, "speculative");
        const bool asked = v && get_bool(*v, "speculative"), refused = v && !asked;
        if (asked && ctx.speculative_tokens <= 0)
            bad("speculative", "This server runs without speculative decoding (start it with --speculative N).",
                "invalid_value");
        if (!refused) q.draft_tokens = ctx.speculative_tokens;
        if (q.draft_tokens > 0) r.make_drafter = ctx.make_drafter;
        q.draft_gate = ctx.draft_gate;
        q.draft_bytes_per_token = ctx.draft_bytes_per_token;
    }

    if (const ojson* v = field(body, "response_format")) q.constraint = parse_response_format(*v, ctx);

    if (chat) {
        if (const ojson* v = field(body, "logprobs")) r.logprobs = get_bool(*v, "logprobs");
        if (const ojson* v = field(body, "top_logprobs")) {
            r.top_logprobs = int(get_int(*v, "top_logprobs", 0, 20));
            if (r.top_logprobs > 0 && !r.logprobs)
                bad("top_logprobs", "Invalid 'top_logprobs': 'logprobs' must be set to true when it is used.",
                    "invalid_value");
        }
        if (const ojson* v = field(body, "modalities")) {
            if (!v->is_array()) bad_type("modalities", "an array of strings", *v);
            for (size_t i = 0; i < v->size(); ++i)
                if (get_string((*v)[i], cat("modalities[", i, "]")) != "text")
                    not_supported(cat("modalities[", i, "]"), "is not supported by this server (text only).");
            r.ignored_fields.push_back("modalities");
        }
        ChatRequest cr;
        cr.add_generation_prompt = true;
        cr.tools = parse_tools(body, ctx, r);
        if (const ojson* v = field(body, "reasoning_effort"))
            cr.kwargs["reasoning_effort"] = get_string(*v, "reasoning_effort");
        if (const ojson* v = field(body, "chat_template_kwargs")) {
            if (!v->is_object()) bad_type("chat_template_kwargs", "an object", *v);
            for (const auto& [key, o] : v->items()) cr.kwargs[key] = o;
        }
        const ojson* messages = field(body, "messages");
        if (!messages) bad_missing("messages");
        const bool knows_developer =
            ctx.chat_template && ctx.chat_template->source().find("developer") != std::string::npos;
        cr.messages = build_messages(*messages, knows_developer);
        if (!ctx.chat_template)
            bad("messages", "This model has no chat template; use /v1/completions with a prompt instead.",
                "unsupported_parameter");
        try {
            r.prompt_text = ctx.chat_template->apply(cr);
        } catch (const Error& e) {
            bad("messages", cat("The chat template could not render these messages: ", e.what()), "invalid_value");
        }
        try {
            q.prompt = tok.encode(r.prompt_text, false);
        } catch (const Error& e) {
            bad("messages", cat("The messages could not be tokenized: ", e.what()), "invalid_value");
        }
        if (ctx.turn_cache_points) q.cache_points = turn_boundaries(*ctx.chat_template, cr, tok, q.prompt);
    } else {
        if (const ojson* v = field(body, "logprobs")) {
            r.top_logprobs = int(get_int(*v, "logprobs", 0, 5));
            r.logprobs = true;
        }
        if (const ojson* v = field(body, "echo")) r.echo = get_bool(*v, "echo");
        if (const ojson* v = field(body, "suffix"))
            if (!get_string(*v, "suffix").empty()) not_supported("suffix", "is not supported by this server.");
        if (const ojson* v = field(body, "best_of"))
            if (get_int(*v, "best_of", 1, 20) != 1) not_supported("best_of", "other than 1 is not supported.");
        const ojson* prompt = field(body, "prompt");
        if (!prompt) bad_missing("prompt");
        std::vector<PromptIn> in = parse_prompts(*prompt, vocab);
        if (int64_t(in.size()) * r.n > k_max_prompts)
            bad("n", cat("Invalid 'n': ", in.size(), " prompts with n = ", r.n, " make more than ", k_max_prompts,
                         " choices."),
                "invalid_value");
        for (size_t k = 0; k < in.size(); ++k) {
            PromptIn& one = in[k];
            const std::string path = in.size() > 1 ? cat("prompt[", k, "]") : "prompt";
            if (one.text) {
                try {
                    one.ids = tok.encode(*one.text, true);
                } catch (const Error& e) {
                    bad(path, cat("The prompt could not be tokenized: ", e.what()), "invalid_value");
                }
                if (one.ids.empty()) bad(path, "The prompt is empty (no tokens).", "invalid_value");
            }
            r.prompts.push_back(std::move(one.ids));
            if (r.echo) r.echo_texts.push_back(one.text ? *one.text : echo_text(tok, r.prompts.back()));
        }
        if (in[0].text) r.prompt_text = *in[0].text;
        q.prompt = r.prompts[0];
        // echo with logprobs scores the prompt: the engine reports the logits after every prompt position
        q.prompt_logits = r.echo && r.logprobs;
    }
    if (q.prompt.empty()) bad(chat ? "messages" : "prompt", "The prompt is empty (no tokens).", "invalid_value");
    if (chat) r.prompts = {q.prompt};

    const int64_t n_ctx = ctx.max_context_tokens;
    int64_t shortest = n_ctx;
    for (size_t k = 0; k < r.prompts.size(); ++k) {
        const int64_t n_prompt = int64_t(r.prompts[k].size());
        shortest = std::min(shortest, n_prompt);
        if (n_prompt < n_ctx) continue;
        const int64_t c = max_tokens.value_or(std::max<int64_t>(ctx.default_max_tokens, 1));
        const std::string total = std::to_string(n_prompt + c);
        bad(chat ? "messages" : r.prompts.size() > 1 ? cat("prompt[", k, "]") : "prompt",
            chat ? cat("This model's maximum context length is ", n_ctx, " tokens. However, you requested ", total,
                       " tokens (", n_prompt, " in the messages, ", c,
                       " in the completion). Please reduce the length of the messages or completion.")
                 : cat("This model's maximum context length is ", n_ctx, " tokens, however you requested ", total,
                       " tokens (", n_prompt, " in your prompt; ", c,
                       " for the completion). Please reduce your prompt; or completion length."),
            "context_length_exceeded");
    }
    // what is left after the shortest prompt; the engine lowers it further for each longer one (to its context)
    const int64_t left = n_ctx - shortest;
    int64_t m = max_tokens.value_or(ctx.default_max_tokens > 0 ? ctx.default_max_tokens : left);
    q.max_new_tokens = std::min(m, left);
    return r;
}

}  // namespace

ParsedRequest parse_request(Endpoint endpoint, const nlohmann::ordered_json& body, const ModelContext& ctx) {
    try {
        return parse_impl(endpoint, body, ctx);
    } catch (const ApiError&) {
        throw;
    } catch (const Error& e) {  // tokenizer or template trouble not caught closer to its source
        throw ApiError(400, "invalid_request_error", e.what(),
                       endpoint == Endpoint::chat_completions ? "messages" : "prompt");
    } catch (const std::exception& e) {  // a bug here, not the client's fault
        throw ApiError(500, "server_error", cat("Internal error while reading the request: ", e.what()));
    }
}

ParsedRequest parse_request(Endpoint endpoint, const nlohmann::json& body, const ModelContext& ctx) {
    nlohmann::ordered_json ordered;
    try {
        check_depth(body);
        ordered = to_ordered(body);
    } catch (const ApiError&) {
        throw;
    } catch (const std::exception& e) {
        throw ApiError(500, "server_error", cat("Internal error while reading the request: ", e.what()));
    }
    return parse_request(endpoint, ordered, ctx);
}

void bad_request(const std::string& param, const std::string& message, const char* code) {
    throw ApiError(400, "invalid_request_error", message, param, code);
}

bool valid_openai_name(const std::string& n) {
    if (n.empty() || n.size() > 64) return false;
    return std::all_of(n.begin(), n.end(), [](unsigned char c) { return std::isalnum(c) || c == '_' || c == '-'; });
}

}  // namespace sluice::api
