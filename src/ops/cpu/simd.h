// Portable inner loops written so the compiler vectorises them without -ffast-math: fixed lane counts with
// explicit partial sums, combined in a fixed order (so results do not depend on the thread count).
#pragma once

#include <cstdint>

namespace sluice::ops::cpu {

inline float dot_f32(const float* a, const float* b, int64_t n) {
    constexpr int L = 16;
    float acc[L] = {};
    int64_t i = 0;
    for (; i + L <= n; i += L)
        for (int l = 0; l < L; ++l) acc[l] += a[i + l] * b[i + l];
    float tail = 0;
    for (; i < n; ++i) tail += a[i] * b[i];
    for (int w = L / 2; w >= 1; w /= 2)
        for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
    return acc[0] + tail;
}

}  // namespace sluice::ops::cpu
