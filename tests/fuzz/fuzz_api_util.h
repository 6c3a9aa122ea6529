// Shared by the fuzz targets of the OpenAI layer (fuzz_openai_request, fuzz_batch_input): the request context they
// validate against, the qwen3_small tokenizer and Qwen3's chat template (with output and loop limits small enough
// for fuzzing), and the abort that turns a broken invariant into a crash libFuzzer reports.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>

#include "api/openai_protocol.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace sluice::fuzz {

inline void check(bool ok) {
    if (!ok) std::abort();
}

struct ApiFixture {
    std::unique_ptr<tok::Tokenizer> tok = tok::load_tokenizer(SLUICE_TEST_DATA_DIR "/tokenizers/qwen3_small");
    std::unique_ptr<ChatTemplate> tpl;
    api::ModelContext ctx;
    // extra_vocab: a logits width past the tokenizer's, as padded models have
    explicit ApiFixture(int64_t extra_vocab = 0) {
        std::ifstream in(SLUICE_TEST_DATA_DIR "/templates/Qwen-Qwen3-0.6B.jinja", std::ios::binary);
        std::ostringstream ss;
        ss << in.rdbuf();
        jinja::Limits limits;
        limits.max_output_bytes = 1 << 18;
        limits.max_loop_iterations = 20000;
        tpl = std::make_unique<ChatTemplate>(ss.str(), limits);
        ctx.model_id = "fuzz";
        ctx.tokenizer = tok.get();
        ctx.chat_template = tpl.get();
        ctx.vocab_size = tok->vocab_size() + extra_vocab;
        ctx.max_context_tokens = 512;
        ctx.default_max_tokens = 64;
    }
};

}  // namespace sluice::fuzz
