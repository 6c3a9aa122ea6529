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
    const SamplingParams& params() const { return p_; }

private:
    struct Candidates {
        std::vector<int32_t> ids;  // best first
        std::vector<double> prob;  // unnormalised after top-p / min-p cuts; they sum to total
        double total = 0;
        double prob_of(int32_t id) const;
    };
    Candidates candidates(std::span<const float> logits) const;
    int32_t draw(const Candidates& c, int32_t skip);  // skip >= 0: that id is excluded
    SamplingParams p_;
    std::mt19937_64 rng_;
};

int32_t argmax(std::span<const float> logits);

}  // namespace sluice
