// The f32 FMA peak of one core with AVX2 + FMA (bench_kernels' compute probe); see avx512_fma_probe.cpp.
#include <immintrin.h>

#include "ops/cpu/kernels.h"

namespace sluice::ops::cpu::avx2 {

double fma_probe(int64_t iterations) {
    constexpr int kChains = 12;
    __m256 acc[kChains];
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(float(c));
    // 1 and 0 read through a volatile: the compiler cannot see the multiply-add is an identity, and no asm
    // barrier is needed (one on the array's elements made GCC keep the chains in memory: a store and a reload
    // in every chain, half the peak).
    volatile float one_f = 1.0f, zero_f = 0.0f;
    const __m256 one = _mm256_set1_ps(one_f), zero = _mm256_set1_ps(zero_f);
    for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
        for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], one, zero);
    }
    __m256 s = zero;
    for (int c = 0; c < kChains; ++c) s = _mm256_add_ps(s, acc[c]);
    alignas(32) float out[8];
    _mm256_store_ps(out, s);
    volatile float sink = out[0];
    (void)sink;
    return double(iterations) * kChains * 8 * 2;
}

}  // namespace sluice::ops::cpu::avx2
