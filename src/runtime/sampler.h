// Next-token sampling in f32: temperature, then top-k, top-p and min-p truncation, then a draw from a seeded
// generator. temperature == 0 is greedy (argmax, lowest id on ties). Same seed and logits -> same tokens.
#pragma once

#include <cstdint>
#include <random>
#include <span>

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
    const SamplingParams& params() const { return p_; }

private:
    SamplingParams p_;
    std::mt19937_64 rng_;
};

int32_t argmax(std::span<const float> logits);

}  // namespace sluice
