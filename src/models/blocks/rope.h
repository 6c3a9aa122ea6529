// Rotary position embeddings: inverse frequencies for default, linear and YaRN scaling, computed in float32 the
// way transformers computes them (so positions far from 0 round identically), and rotation of interleaved
// (DeepSeek: pairs (2i, 2i+1)) or half-split (NeoX: pairs (i, i+d/2)) layouts.
#pragma once

#include <cstdint>
#include <vector>

#include "formats/hf_config.h"

namespace sluice {

class Rope {
public:
    Rope() = default;
    Rope(const RopeParameters& p, int64_t dim);  // dim = rotated width per head

    int64_t dim() const { return dim_; }
    float attention_factor() const { return attention_factor_; }  // multiplies cos and sin
    const std::vector<float>& inv_freq() const { return inv_freq_; }

    // Rotates x[n_heads * head_stride] in place for one position; the rotated part of head h starts at
    // x + h * head_stride.
    void apply_interleaved(float* x, int64_t n_heads, int64_t head_stride, int64_t position) const;
    void apply_half(float* x, int64_t n_heads, int64_t head_stride, int64_t position) const;

private:
    void cos_sin(int64_t position, std::vector<float>& c, std::vector<float>& s) const;
    int64_t dim_ = 0;
    std::vector<float> inv_freq_;  // [dim/2]
    float attention_factor_ = 1.0f;
};

}  // namespace sluice
