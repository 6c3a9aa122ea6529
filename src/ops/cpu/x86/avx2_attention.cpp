// Attention's inner loops with AVX2 (ops/cpu/attention.cpp picks them on the avx2 path): the portable loops of
// ops/cpu/simd.h lane for lane, as x86/avx512_attention.cpp does with 16 lanes. dot_f32's 16 partial sums are two
// 8-lane vectors (lanes 0-7 and 8-15), combined in its order (l += l + 8, + 4, + 2, + 1), and a multiply and an add
// stay two roundings (this file is compiled with -ffp-contract=off and without FMA): the portable path's bits.
#include <immintrin.h>

#include "ops/cpu/kernels.h"

namespace sluice::ops::cpu::avx2 {

namespace {
// lanes[l] += lanes[l + w] for w = 8, 4, 2, 1 (dot_f32's order), then lane 0 + tail
inline float reduce(__m256 lo, __m256 hi, float tail) {
    const __m256 v8 = _mm256_add_ps(lo, hi);                                                      // w = 8
    __m128 v = _mm_add_ps(_mm256_castps256_ps128(v8), _mm256_extractf128_ps(v8, 1));               // w = 4
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));                                                       // w = 2
    v = _mm_add_ss(v, _mm_shuffle_ps(v, v, _MM_SHUFFLE(1, 1, 1, 1)));                             // w = 1
    return _mm_cvtss_f32(v) + tail;
}

inline __m256 mul_add(__m256 acc, __m256 a, __m256 b) { return _mm256_add_ps(acc, _mm256_mul_ps(a, b)); }
}  // namespace

void attention_dots(const float* q, const float* const* keys, int64_t n_keys, int64_t n, float scale, float* out) {
    const int64_t full = n / 16 * 16;
    int64_t t = 0;
    for (; t + 4 <= n_keys; t += 4) {  // four keys share each load of q
        const float *k0 = keys[t], *k1 = keys[t + 1], *k2 = keys[t + 2], *k3 = keys[t + 3];
        __m256 a0 = _mm256_setzero_ps(), b0 = a0, a1 = a0, b1 = a0, a2 = a0, b2 = a0, a3 = a0, b3 = a0;
        for (int64_t i = 0; i < full; i += 16) {
            const __m256 qa = _mm256_loadu_ps(q + i), qb = _mm256_loadu_ps(q + i + 8);
            a0 = mul_add(a0, qa, _mm256_loadu_ps(k0 + i));
            b0 = mul_add(b0, qb, _mm256_loadu_ps(k0 + i + 8));
            a1 = mul_add(a1, qa, _mm256_loadu_ps(k1 + i));
            b1 = mul_add(b1, qb, _mm256_loadu_ps(k1 + i + 8));
            a2 = mul_add(a2, qa, _mm256_loadu_ps(k2 + i));
            b2 = mul_add(b2, qb, _mm256_loadu_ps(k2 + i + 8));
            a3 = mul_add(a3, qa, _mm256_loadu_ps(k3 + i));
            b3 = mul_add(b3, qb, _mm256_loadu_ps(k3 + i + 8));
        }
        float t0 = 0, t1 = 0, t2 = 0, t3 = 0;
        for (int64_t i = full; i < n; ++i) {
            t0 += q[i] * k0[i];
            t1 += q[i] * k1[i];
            t2 += q[i] * k2[i];
            t3 += q[i] * k3[i];
        }
        out[t] = reduce(a0, b0, t0) * scale;
        out[t + 1] = reduce(a1, b1, t1) * scale;
        out[t + 2] = reduce(a2, b2, t2) * scale;
        out[t + 3] = reduce(a3, b3, t3) * scale;
    }
    for (; t < n_keys; ++t) {
        const float* k = keys[t];
        __m256 a = _mm256_setzero_ps(), b = a;
        for (int64_t i = 0; i < full; i += 16) {
            a = mul_add(a, _mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i));
            b = mul_add(b, _mm256_loadu_ps(q + i + 8), _mm256_loadu_ps(k + i + 8));
        }
        float tail = 0;
        for (int64_t i = full; i < n; ++i) tail += q[i] * k[i];
        out[t] = reduce(a, b, tail) * scale;
    }
}

void attention_axpys(const float* p, const float* const* values, int64_t n_values, float* acc, int64_t n) {
    // 8 lanes at a time, the accumulator held in registers across all the values (the same adds, in value order)
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
        __m256 y0 = _mm256_loadu_ps(acc + j), y1 = _mm256_loadu_ps(acc + j + 8), y2 = _mm256_loadu_ps(acc + j + 16),
               y3 = _mm256_loadu_ps(acc + j + 24);
        for (int64_t t = 0; t < n_values; ++t) {
            const __m256 pv = _mm256_set1_ps(p[t]);
            const float* x = values[t] + j;
            y0 = mul_add(y0, pv, _mm256_loadu_ps(x));
            y1 = mul_add(y1, pv, _mm256_loadu_ps(x + 8));
            y2 = mul_add(y2, pv, _mm256_loadu_ps(x + 16));
            y3 = mul_add(y3, pv, _mm256_loadu_ps(x + 24));
        }
        _mm256_storeu_ps(acc + j, y0);
        _mm256_storeu_ps(acc + j + 8, y1);
        _mm256_storeu_ps(acc + j + 16, y2);
        _mm256_storeu_ps(acc + j + 24, y3);
    }
    for (; j < n; ++j) {  // the last columns one at a time, as the portable loop
        float y = acc[j];
        for (int64_t t = 0; t < n_values; ++t) y += p[t] * values[t][j];
        acc[j] = y;
    }
}

}  // namespace sluice::ops::cpu::avx2
