// Draft tokens for speculative decoding: what a drafter proposes to follow a context, and prompt lookup, the
// drafter that needs no model (the tokens that followed the most recent earlier occurrence of the context's longest
// suffix n-gram). The engine verifies drafts; runtime/draft_model.h is the second Drafter, a smaller model.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "models/draft_pick.h"

namespace sluice {

class SequenceState;

// Proposes up to max_tokens tokens to follow `context` (prompt + generated so far). `target` is the target's state
// for this request when the engine calls it (it holds every context token but the last; a drafter that reads the
// target's hidden states, runtime/dspark_drafter.h, takes them from its taps()), else null. `pick`, when given,
// is how a drafter that computes logits chooses each token (a sampled request's engine passes one that draws from
// them and records the distribution, so the verification can accept by min(1, p/q)); the drafts it returns are
// then the picks' results in order (it may stop early). A drafter may ignore pick (prompt lookup does): its drafts
// are verified as deterministic guesses, also exactly.
using Drafter = std::function<std::vector<int32_t>(std::span<const int32_t> context, int64_t max_tokens,
                                                   const SequenceState* target, const DraftPick* pick)>;

// For drafters that read the target's hidden states (DSpark, EAGLE-3): whether `target` holds tap rows of `width`
// floats for every one of `tokens` (the context's first tokens), run by the target as these very tokens.
bool target_taps_cover(const SequenceState* target, std::span<const int32_t> tokens, int64_t width);

// Up to max_tokens tokens that followed the most recent earlier occurrence of the longest suffix of `context`
// (between ngram_min and ngram_max tokens long); empty when none occurred.
std::vector<int32_t> lookup_draft(std::span<const int32_t> context, int64_t max_tokens, int64_t ngram_min,
                                  int64_t ngram_max);

}  // namespace sluice
