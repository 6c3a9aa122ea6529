// Fuzzes the tokenizer file parsers: tokenizer.json (model, normalizer, pre-tokenizer, decoder, added tokens),
// tiktoken.model and tokenizer_config.json. Byte 0 picks the format (even: tokenizer.json, odd: tiktoken.model);
// the rest is the tokenizer file, then, after a line "@@config@@", tokenizer_config.json. Whatever loads must
// encode and decode a short text (and every id the vocabulary claims) without misbehaving; anything else must
// be a sluice::Error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    const std::string_view all(reinterpret_cast<const char*>(data + 1), size - 1);
    constexpr std::string_view kSplit = "\n@@config@@\n";
    const size_t at = all.find(kSplit);
    const std::string_view file = all.substr(0, at), config = at == all.npos ? "" : all.substr(at + kSplit.size());
    try {
        const auto tok = data[0] % 2 == 0 ? sluice::tok::load_hf_tokenizer(file, config, "fuzz/tokenizer.json")
                                          : sluice::tok::load_tiktoken_tokenizer(file, config, "fuzz/tiktoken.model");
        const auto ids = tok->encode("Hello, world! 123 <|im_end|> \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x98\x80", true);
        (void)tok->decode(ids);
        std::vector<int32_t> every;
        for (int64_t i = 0; i < tok->vocab_size() && i < 4096; ++i) every.push_back(int32_t(i));
        (void)tok->decode(every);
    } catch (const sluice::Error&) {
    }
    return 0;
}
