// The f32 FMA peak of one core with AVX-512 (bench_kernels' compute probe): 24 independent accumulator chains, so
// two FMA ports with a 4-cycle latency stay busy; the values stay finite (x * 1 + 0) and are summed at the end so the
// loop is not optimised away.
#include <immintrin.h>

#include "ops/cpu/kernels.h"

namespace sluice::ops::cpu::avx512 {

double fma_probe(int64_t iterations) {
    constexpr int kChains = 24;
    __m512 acc[kChains];
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(float(c));
    const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 24
        for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], one, zero);
        __asm__ volatile("" : "+v"(acc[0]), "+v"(acc[1]), "+v"(acc[2]), "+v"(acc[3]));
    }
    __m512 s = zero;
    for (int c = 0; c < kChains; ++c) s = _mm512_add_ps(s, acc[c]);
    volatile float sink = _mm512_reduce_add_ps(s);
    (void)sink;
    return double(iterations) * kChains * 16 * 2;
}

}  // namespace sluice::ops::cpu::avx512
