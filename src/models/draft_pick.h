// How a drafting model turns its next-token logits into a draft token. Greedy drafting takes the argmax (lowest
// index on ties); a sampled request's engine passes a DraftPick that draws from the logits as the request samples
// and records the distribution it drew from, which its verification needs (runtime/sampler.h, Sampler::draw_draft).
#pragma once

#include <cstdint>
#include <functional>
#include <span>

namespace sluice {

// logits over the drafter's vocabulary; offsets: drafter index i is target token i + offsets[i] (EAGLE-3's d2t),
// empty when the drafter's vocabulary is the target's. Returns the target token id.
using DraftPick = std::function<int32_t(std::span<const float> logits, std::span<const int64_t> offsets)>;

// The drafter's choice: pick's when given, else the argmax (mapped through offsets).
inline int32_t pick_draft(const DraftPick* pick, std::span<const float> logits, std::span<const int64_t> offsets = {}) {
    if (pick && *pick) return (*pick)(logits, offsets);
    size_t best = 0;
    for (size_t i = 1; i < logits.size(); ++i)
        if (logits[i] > logits[best]) best = i;
    return int32_t(offsets.empty() ? int64_t(best) : int64_t(best) + offsets[best]);
}

}  // namespace sluice
