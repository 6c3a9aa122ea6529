// RoPE's rotation on the CPU (ops/rope.h): the loops models/blocks/rope.cpp had, unchanged in arithmetic.
#include "ops/rope.h"

namespace sluice::ops {

void rope_rotate(RopeLayout layout, const float* c, const float* s, int64_t half, float* x, int64_t n_heads,
                 int64_t head_stride) {
    for (int64_t h = 0; h < n_heads; ++h) {
        float* v = x + h * head_stride;
        if (layout == RopeLayout::Interleaved) {
            for (int64_t i = 0; i < half; ++i) {
                const float a = v[2 * i], b = v[2 * i + 1];
                v[2 * i] = a * c[i] - b * s[i];
                v[2 * i + 1] = b * c[i] + a * s[i];
            }
        } else {
            for (int64_t i = 0; i < half; ++i) {
                const float a = v[i], b = v[i + half];
                v[i] = a * c[i] - b * s[i];
                v[i + half] = b * c[i] + a * s[i];
            }
        }
    }
}

}  // namespace sluice::ops
