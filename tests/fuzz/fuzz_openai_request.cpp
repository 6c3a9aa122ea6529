// libFuzzer target: OpenAI request bodies. Input that parses as JSON goes through parse_request for both endpoints
// (as json and as ordered_json) against the qwen3_small tokenizer and Qwen3's chat template; the only exception
// allowed out is ApiError with status 400 (a 500 means a bug inside). A request that parses has its prompt ids run
// through ChoiceText with its stop sequences and its response bodies built and serialised.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "api/openai_protocol.h"
#include "fuzz_api_util.h"
#include "tokenizer/unicode.h"

namespace {

using namespace sluice;
using namespace sluice::api;

using fuzz::check;

void exercise(const ParsedRequest& r, const tok::Tokenizer& tok) {
    check(!r.params.prompt.empty() && r.params.max_new_tokens >= 1 && r.n >= 1 && r.n <= 128);
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
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const fuzz::ApiFixture fx(64);
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    const nlohmann::json body = nlohmann::json::parse(in, nullptr, false);
    if (body.is_discarded()) return 0;
    const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(in, nullptr, false);
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
