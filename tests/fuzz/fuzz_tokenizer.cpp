// Fuzzes the tokenizers with arbitrary bytes: encode with the Kimi-like tiktoken fixture and the small DeepSeek and
// Qwen3 tokenizer.json fixtures, then decode. Checks that decode(encode(x)) is x with invalid UTF-8 replaced,
// that streaming decode equals whole decode, and that decoding the input read as ids never misbehaves.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace {

using sluice::tok::Tokenizer;

struct Fixtures {
    std::unique_ptr<Tokenizer> kimi = sluice::tok::load_tokenizer(SLUICE_TEST_DATA_DIR "/tokenizers/kimi_like");
    std::unique_ptr<Tokenizer> deepseek =
        sluice::tok::load_tokenizer(SLUICE_TEST_DATA_DIR "/tokenizers/deepseek_v3_small");
    std::unique_ptr<Tokenizer> qwen = sluice::tok::load_tokenizer(SLUICE_TEST_DATA_DIR "/tokenizers/qwen3_small");
};

void check(bool ok) {
    if (!ok) std::abort();
}

std::string streamed(const Tokenizer& tok, const std::vector<int32_t>& ids) {
    sluice::tok::StreamDecoder stream(tok);
    std::string out;
    for (int32_t id : ids) {
        std::string part = stream.push(id);
        check(sluice::tok::utf8_valid(part));
        out += part;
    }
    return out + stream.finish();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const Fixtures fx;
    const std::string text(reinterpret_cast<const char*>(data), size);
    const std::string repaired = sluice::tok::utf8_lossy(text);
    for (const Tokenizer* tok : {fx.kimi.get(), fx.deepseek.get(), fx.qwen.get()}) {
        const auto ids = tok->encode(text, size % 2 == 0);
        for (int32_t id : ids) check(id >= 0 && id < tok->vocab_size());
        const std::string decoded = tok->decode(tok->encode(text, false));
        if (tok != fx.qwen.get()) check(decoded == repaired);  // Qwen3 NFC-normalizes, so only compare others
        check(streamed(*tok, ids) == tok->decode(ids));
        // The input read as little-endian ids: in-range ones decode, out-of-range ones throw sluice::Error.
        std::vector<int32_t> raw;
        for (size_t i = 0; i + 4 <= size && raw.size() < 64; i += 4) {
            int32_t v;
            __builtin_memcpy(&v, data + i, 4);
            raw.push_back(v % (tok->vocab_size() + 16));
        }
        try {
            check(streamed(*tok, raw) == tok->decode(raw));
        } catch (const sluice::Error&) {
        }
    }
    return 0;
}
