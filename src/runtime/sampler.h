// Next-token sampling in f32: temperature, then top-k, top-p and min-p truncation, then a draw from a seeded
// generator. temperature == 0 is greedy (argmax, lowest id on ties). Same seed and logits -> same tokens.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace sluice {

struct SamplingParams {
    float temperature = 0.0f;
    int64_t top_k = 0;    // 0 = off
    float top_p = 1.0f;   // 1 = off
    float min_p = 0.0f;   // 0 = off
    uint64_t seed = 0;
};

// The distribution a sampled draft was drawn from (Sampler::draw_draft): target ids and their probabilities, which
// sum to 1; every other id has probability 0.
struct DraftDist {
    std::vector<int32_t> ids;
    std::vector<double> prob;
    double of(int32_t id) const;
};

class Sampler {
public:
    explicit Sampler(const SamplingParams& p);  // validates; throws Error on out-of-range values
    int32_t sample(std::span<const float> logits);
    // Speculative verification of a drafted token (the drafter proposed it deterministically): accepted with the
    // probability sample() would give it, else a token drawn from the same distribution without it -- so the token
    // is distributed exactly as sample(logits) would draw it (Leviathan et al. 2023; Chen et al. 2023). Greedy:
    // the argmax, accepted when it is the draft.
    struct Verdict {
        int32_t id;
        bool accepted;
    };
    Verdict verify(std::span<const float> logits, int32_t draft);
    // The same for a draft drawn from q (draw_draft): accepted with probability min(1, p(draft) / q(draft)), else
    // a draw from the residual max(0, p - q), renormalised -- again exactly p, whatever q is (Leviathan et al.
    // 2023, Chen et al. 2023); a q near p accepts far more often than a fixed guess. Greedy: as above.
    Verdict verify(std::span<const float> logits, int32_t draft, const DraftDist& q);
    // A draft drawn from a drafter's logits (offsets: as DraftPick's) as this request samples -- temperature, top-k,
    // top-p, min-p -- over at most max_support of its likeliest tokens; q receives that distribution. Its own
    // generator (seeded from the request's seed), so the drafts are a function of the seed and the context alone.
    // Greedy requests: the argmax, q one-hot.
    int32_t draw_draft(std::span<const float> logits, std::span<const int64_t> offsets, DraftDist& q,
                       size_t max_support = kDraftSupport);
    static constexpr size_t kDraftSupport = 256;
    // From this many candidates (a whole vocabulary sorted, no top-k) the candidate order comes from a radix sort;
    // the order is the same either way (tests/unit/test_sampler.cpp checks both sizes against a comparison sort).
    static constexpr size_t kRadixSortFrom = 4096;
    const SamplingParams& params() const { return p_; }

private:
    struct Candidates {
        std::vector<int32_t> ids;  // best first
        std::vector<double> prob;  // unnormalised after top-p / min-p cuts; they sum to total
        double total = 0;
        double prob_of(int32_t id) const;
    };
    Candidates candidates(std::span<const float> logits, size_t max_keep = SIZE_MAX) const;
    int32_t draw(const Candidates& c, int32_t skip);  // skip >= 0: that id is excluded
    SamplingParams p_;
    std::mt19937_64 rng_;
    std::mt19937_64 draft_rng_;
};

int32_t argmax(std::span<const float> logits);

}  // namespace sluice
