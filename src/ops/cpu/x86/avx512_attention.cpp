// Attention's inner loops with AVX-512 (ops/cpu/attention.cpp picks them on the avx512 and amx paths): the same
// arithmetic as the portable loops in ops/cpu/simd.h, lane for lane — 16 partial sums combined in the same order, a
// multiply and an add rounded separately (this file is compiled with -ffp-contract=off: no fused multiply-adds) —
// so the bits are those of the portable path, only computed 16 lanes at a time.
#include <immintrin.h>

#include "ops/cpu/kernels.h"

namespace sluice::ops::cpu::avx512 {

float attention_dot(const float* a, const float* b, int64_t n) {
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
    float tail = 0;
    for (; i < n; ++i) tail += a[i] * b[i];
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, acc);
    for (int w = 8; w >= 1; w /= 2)
        for (int l = 0; l < w; ++l) lanes[l] += lanes[l + w];
    return lanes[0] + tail;
}

void attention_axpy(float a, const float* x, float* y, int64_t n) {
    const __m512 av = _mm512_set1_ps(a);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        _mm512_storeu_ps(y + j, _mm512_add_ps(_mm512_loadu_ps(y + j), _mm512_mul_ps(av, _mm512_loadu_ps(x + j))));
    if (j < n) {
        const __mmask16 m = __mmask16((1u << (n - j)) - 1);
        _mm512_mask_storeu_ps(y + j, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, y + j),
                                                      _mm512_mul_ps(av, _mm512_maskz_loadu_ps(m, x + j))));
    }
}

}  // namespace sluice::ops::cpu::avx512
