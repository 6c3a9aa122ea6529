// Speculative decoding with prompt-lookup drafts: after each token, the longest recent n-gram of the context that
// occurred before proposes the tokens that followed it; one forward pass verifies the token and its drafts together
// (one expert read for all of those rows), the drafts that match the model's own argmax are kept, and the cache is
// rolled back past the rest. Greedy only, so the output is exactly generate()'s with temperature 0: each verified
// row gets the same bits it would get decoded alone (the forward pass is bit-identical for any rows in a batch).
// Every architecture: per-token caches are cut back, Kimi's recurrent KDA state is restored from a snapshot taken
// before the verify pass and replays the accepted rows (state/sequence_state.h).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "models/model.h"
#include "runtime/generate.h"

namespace sluice {

// Proposes up to max_tokens tokens to follow `context` (prompt + generated so far).
using Drafter = std::function<std::vector<int32_t>(std::span<const int32_t> context, int64_t max_tokens)>;

struct SpeculativeOptions {
    int64_t draft_tokens = 4;  // drafts verified per forward pass (>= 1)
    int64_t ngram_max = 4;     // longest context suffix looked up
    int64_t ngram_min = 1;     // shortest
    Drafter drafter;           // empty: prompt lookup (lookup_draft); a draft model would plug in here
};

struct SpeculativeStats {
    int64_t forward_passes = 0;  // decode passes (prefill not counted)
    int64_t drafted = 0;         // draft tokens verified
    int64_t accepted = 0;        // ... of which were kept
};

// Up to max_tokens tokens that followed the most recent earlier occurrence of the longest suffix of `context`
// (between ngram_min and ngram_max tokens long); empty when none occurred.
std::vector<int32_t> lookup_draft(std::span<const int32_t> context, int64_t max_tokens, int64_t ngram_min,
                                  int64_t ngram_max);

// generate() for temperature 0 with drafts: same ids, same stop reasons. Throws Error when sampling is not greedy.
GenerateResult generate_speculative(Model& model, std::span<const int32_t> prompt, const GenerateOptions& opt,
                                    const SpeculativeOptions& spec, SpeculativeStats* stats = nullptr,
                                    const std::function<bool(int32_t)>& on_token = nullptr);

}  // namespace sluice
