// The f32 FMA peak of one core with AVX-512 (bench_kernels' compute probe): 24 independent accumulator chains, so
// two FMA ports with a 4-cycle latency stay busy; the values stay finite (x * 1 + 0) and are summed at the end so the
// loop is not optimised away. GCC 12 warns about the _mm512_undefined_* inside its own _mm512_reduce_add_ps (a known
// false positive).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include "ops/cpu/kernels.h"

namespace sluice::ops::cpu::avx512 {

double fma_probe(int64_t iterations) {
    constexpr int kChains = 24;
    __m512 acc[kChains];
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(float(c));
    // 1 and 0 read through a volatile: the compiler cannot see the multiply-add is an identity, and no asm
    // barrier is needed (one on the array's elements made GCC keep the chains in memory: a store and a reload
    // in every chain, half the peak).
    volatile float one_f = 1.0f, zero_f = 0.0f;
    const __m512 one = _mm512_set1_ps(one_f), zero = _mm512_set1_ps(zero_f);
    for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 24
        for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], one, zero);
    }
    __m512 s = zero;
    for (int c = 0; c < kChains; ++c) s = _mm512_add_ps(s, acc[c]);
    volatile float sink = _mm512_reduce_add_ps(s);
    (void)sink;
    return double(iterations) * kChains * 16 * 2;
}

}  // namespace sluice::ops::cpu::avx512
