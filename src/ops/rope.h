// Rotary position embedding's rotation (the angles' cos and sin come from models/blocks/rope.h, which computes them
// from the config the way transformers does). Reference twin in ops::ref (ops/reference/rope.cpp).
#pragma once

#include <cstdint>

namespace sluice::ops {

enum class RopeLayout : uint8_t {
    Interleaved,  // DeepSeek / Kimi: pairs (2i, 2i + 1)
    Half,         // NeoX / Qwen / gpt-oss: pairs (i, i + half)
};

// Rotates pair i of each of n_heads heads (head h at x + h * head_stride) by (cos[i], sin[i]), i < half, in place:
// (a, b) -> (a cos - b sin, b cos + a sin).
void rope_rotate(RopeLayout layout, const float* cos, const float* sin, int64_t half, float* x, int64_t n_heads,
                 int64_t head_stride);

}  // namespace sluice::ops

namespace sluice::ops::ref {
void rope_rotate(RopeLayout layout, const float* cos, const float* sin, int64_t half, float* x, int64_t n_heads,
                 int64_t head_stride);
}  // namespace sluice::ops::ref
