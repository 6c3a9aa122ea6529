// libFuzzer target: OpenAI request bodies. Input that parses as JSON goes through parse_request for both endpoints
// (as json and as ordered_json) against the qwen3_small tokenizer and Qwen3's chat template; the only exception
// allowed out is ApiError with status 400 (a 500 means a bug inside). A request that parses has its prompt ids run
// through ChoiceText with its stop sequences and its response bodies built and serialised (several prompts and echo
// entries included). The same body also goes to the tokenizer routes (/tokenize, /detokenize), under the same rule.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "api/openai_protocol.h"
#include "api/tokenizer_endpoints.h"
#include "fuzz_api_util.h"
#include "tokenizer/unicode.h"

namespace {

using namespace sluice;
using namespace sluice::api;

using fuzz::check;

void exercise(const ParsedRequest& r, const tok::Tokenizer& tok) {
    const bool chat = r.endpoint == Endpoint::chat_completions;
    check(!r.params.prompt.empty() && r.params.max_new_tokens >= (chat ? 1 : 0) && r.n >= 1 && r.n <= 128);
    check(!r.prompts.empty() && r.prompts[0] == r.params.prompt && r.choices() <= (chat ? 128 : k_max_prompts));
    check(!r.echo || r.echo_texts.size() == r.prompts.size());
    check(r.params.prompt_logits == (r.echo && r.logprobs));
    for (const auto& p : r.prompts) {
        check(!p.empty() && p.size() < 512);  // the fixture's context
        for (int32_t id : p) check(id >= 0 && id < tok.vocab_size() + 64);  // its logits width
    }
    check(r.stop.size() <= 4);
    ChoiceText text(tok, r.stop);
    std::string sent;
    for (size_t i = 0; i < r.params.prompt.size() && i < 64 && !text.stopped(); ++i)
        sent += text.push(r.params.prompt[i]);
    sent += text.finish();
    check(sent == text.text() && tok::utf8_valid(sent));
    for (const auto& s : r.stop) check(sent.find(s) == std::string::npos);
    const std::string id = new_completion_id(r.endpoint);
    (void)completion_json(r, id, 1, {{sent, text.stopped() ? "stop" : "length", nullptr}}, Usage{1, 2}).dump();
    (void)chunk_json(r, id, 1, 0, sent, "", true).dump();
    // an echoed prompt's entries (first null) in the completions logprobs shape
    if (r.echo && r.logprobs) {
        nlohmann::json entries = nlohmann::json::array({first_prompt_entry(tok, r.prompts.back()[0])});
        std::vector<float> logits(size_t(tok.vocab_size()), 0.0f);
        for (size_t i = 1; i < r.prompts.back().size() && i < 8; ++i)
            entries.push_back(chat_logprob_entry(tok, r.prompts.back()[i], logits, r.top_logprobs));
        const nlohmann::json lp = logprobs_object(r, entries, 0);
        check(lp["token_logprobs"][0].is_null() && lp["tokens"].size() == entries.size());
        (void)lp.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
}

void tokenizer_routes(const nlohmann::ordered_json& body, const ModelContext& ctx) {
    for (auto fn : {tokenize_json, detokenize_json}) {
        try {
            (void)fn(body, ctx).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        } catch (const ApiError& e) {
            check(e.status == 400 && !std::string(e.what()).empty());
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const fuzz::ApiFixture fx(64);
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    const nlohmann::json body = nlohmann::json::parse(in, nullptr, false);
    if (body.is_discarded()) return 0;
    const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(in, nullptr, false);
    tokenizer_routes(ordered, fx.ctx);
    for (Endpoint ep : {Endpoint::chat_completions, Endpoint::completions}) {
        try {
            exercise(parse_request(ep, body, fx.ctx), *fx.tok);
        } catch (const ApiError& e) {
            check(e.status == 400 && !std::string(e.what()).empty());
            (void)error_json(e).dump();
        }
        try {
            (void)parse_request(ep, ordered, fx.ctx);
        } catch (const ApiError& e) {
            check(e.status == 400);
        }
    }
    return 0;
}
