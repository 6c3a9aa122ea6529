// A tiny byte-level BPE tokenizer in Hugging Face format for synthesized checkpoints: 6 special tokens
// (<|bos|> 0, <|eos|> 1, <|pad|> 2, <|system|> 3, <|user|> 4, <|assistant|> 5), the 256 GPT-2 byte symbols
// (ids 6..261) and a few dozen English merges, plus a tokenizer_config.json with a minimal chat template.
// Any UTF-8 text round-trips through it, so a random-weight model's output can still be printed.
#pragma once

#include <cstdint>
#include <string>

namespace sluice::synth {

constexpr int64_t kSynthBosId = 0, kSynthEosId = 1, kSynthPadId = 2;

std::string synth_tokenizer_json();         // tokenizer.json text
std::string synth_tokenizer_config_json();  // tokenizer_config.json text
int64_t synth_tokenizer_vocab_size();       // number of ids used (vocab_size must be at least this)

}  // namespace sluice::synth
