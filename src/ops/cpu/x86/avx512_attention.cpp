// Attention's inner loops with AVX-512 (ops/cpu/attention.cpp picks them on the avx512 and amx paths): the same
// arithmetic as the portable loops in ops/cpu/simd.h, lane for lane — 16 partial sums combined in the same order, a
// multiply and an add rounded separately (this file is compiled with -ffp-contract=off: no fused multiply-adds) —
// so the bits are those of the portable path, only computed 16 lanes and several keys at a time.
// GCC 12 warns about the _mm512_undefined_* inside its own intrinsic headers (a known false positive).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "ops/cpu/kernels.h"

namespace sluice::ops::cpu::avx512 {

namespace {
// lanes[l] += lanes[l + w] for w = 8, 4, 2, 1 (dot_f32's order), then lane 0 + tail
inline float reduce(__m512 v, float tail) {
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(3, 2, 3, 2)));
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 1, 1, 1)));
    v = _mm512_add_ps(v, _mm512_permute_ps(v, _MM_SHUFFLE(3, 2, 3, 2)));
    v = _mm512_add_ps(v, _mm512_permute_ps(v, _MM_SHUFFLE(1, 1, 1, 1)));
    return _mm512_cvtss_f32(v) + tail;
}

inline __m512 mul_add(__m512 acc, __m512 a, __m512 b) { return _mm512_add_ps(acc, _mm512_mul_ps(a, b)); }
}  // namespace

void attention_dots(const float* q, const float* const* keys, int64_t n_keys, int64_t n, float scale, float* out) {
    const int64_t full = n / 16 * 16;
    int64_t t = 0;
    for (; t + 4 <= n_keys; t += 4) {  // four keys share each load of q
        const float *k0 = keys[t], *k1 = keys[t + 1], *k2 = keys[t + 2], *k3 = keys[t + 3];
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t i = 0; i < full; i += 16) {
            const __m512 qv = _mm512_loadu_ps(q + i);
            a0 = mul_add(a0, qv, _mm512_loadu_ps(k0 + i));
            a1 = mul_add(a1, qv, _mm512_loadu_ps(k1 + i));
            a2 = mul_add(a2, qv, _mm512_loadu_ps(k2 + i));
            a3 = mul_add(a3, qv, _mm512_loadu_ps(k3 + i));
        }
        float t0 = 0, t1 = 0, t2 = 0, t3 = 0;
        for (int64_t i = full; i < n; ++i) {
            t0 += q[i] * k0[i];
            t1 += q[i] * k1[i];
            t2 += q[i] * k2[i];
            t3 += q[i] * k3[i];
        }
        out[t] = reduce(a0, t0) * scale;
        out[t + 1] = reduce(a1, t1) * scale;
        out[t + 2] = reduce(a2, t2) * scale;
        out[t + 3] = reduce(a3, t3) * scale;
    }
    for (; t < n_keys; ++t) {
        const float* k = keys[t];
        __m512 a = _mm512_setzero_ps();
        for (int64_t i = 0; i < full; i += 16) a = mul_add(a, _mm512_loadu_ps(q + i), _mm512_loadu_ps(k + i));
        float tail = 0;
        for (int64_t i = full; i < n; ++i) tail += q[i] * k[i];
        out[t] = reduce(a, tail) * scale;
    }
}

void attention_axpys(const float* p, const float* const* values, int64_t n_values, float* acc, int64_t n) {
    // 16 lanes at a time, the accumulator held in a register across all the values (the same adds, in value order)
    int64_t j = 0;
    for (; j + 64 <= n; j += 64) {
        __m512 y0 = _mm512_loadu_ps(acc + j), y1 = _mm512_loadu_ps(acc + j + 16), y2 = _mm512_loadu_ps(acc + j + 32),
               y3 = _mm512_loadu_ps(acc + j + 48);
        for (int64_t t = 0; t < n_values; ++t) {
            const __m512 pv = _mm512_set1_ps(p[t]);
            const float* x = values[t] + j;
            y0 = mul_add(y0, pv, _mm512_loadu_ps(x));
            y1 = mul_add(y1, pv, _mm512_loadu_ps(x + 16));
            y2 = mul_add(y2, pv, _mm512_loadu_ps(x + 32));
            y3 = mul_add(y3, pv, _mm512_loadu_ps(x + 48));
        }
        _mm512_storeu_ps(acc + j, y0);
        _mm512_storeu_ps(acc + j + 16, y1);
        _mm512_storeu_ps(acc + j + 32, y2);
        _mm512_storeu_ps(acc + j + 48, y3);
    }
    for (; j < n; j += 16) {
        const __mmask16 m = n - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - j)) - 1);
        __m512 y = _mm512_maskz_loadu_ps(m, acc + j);
        for (int64_t t = 0; t < n_values; ++t)
            y = mul_add(y, _mm512_set1_ps(p[t]), _mm512_maskz_loadu_ps(m, values[t] + j));
        _mm512_mask_storeu_ps(acc + j, m, y);
    }
}

// Four pairs at once: every load of a key or value row serves four queries, so a group of 16 lanes costs 8 loads
// for 16 products where one pair at a time costs 5 for 4 (the loops were bound by loads). Each pair's arithmetic is
// exactly attention_dots' / attention_axpys': the same lanes, the same order.
void attention_dots4(const float* const* q, const float* const* keys, int64_t n_keys, int64_t n, float scale,
                     float* const* out) {
    const int64_t full = n / 16 * 16;
    int64_t t = 0;
    for (; t + 4 <= n_keys; t += 4) {
        const float* k[4] = {keys[t], keys[t + 1], keys[t + 2], keys[t + 3]};
        __m512 a[4][4];
        for (int m = 0; m < 4; ++m)
            for (int j = 0; j < 4; ++j) a[m][j] = _mm512_setzero_ps();
        for (int64_t i = 0; i < full; i += 16) {
            const __m512 k0 = _mm512_loadu_ps(k[0] + i), k1 = _mm512_loadu_ps(k[1] + i),
                         k2 = _mm512_loadu_ps(k[2] + i), k3 = _mm512_loadu_ps(k[3] + i);
#pragma GCC unroll 4
            for (int m = 0; m < 4; ++m) {
                const __m512 qv = _mm512_loadu_ps(q[m] + i);
                a[m][0] = mul_add(a[m][0], qv, k0);
                a[m][1] = mul_add(a[m][1], qv, k1);
                a[m][2] = mul_add(a[m][2], qv, k2);
                a[m][3] = mul_add(a[m][3], qv, k3);
            }
        }
        for (int m = 0; m < 4; ++m)
            for (int j = 0; j < 4; ++j) {
                float tail = 0;
                for (int64_t i = full; i < n; ++i) tail += q[m][i] * k[j][i];
                out[m][t + j] = reduce(a[m][j], tail) * scale;
            }
    }
    if (t < n_keys)
        for (int m = 0; m < 4; ++m) attention_dots(q[m], keys + t, n_keys - t, n, scale, out[m] + t);
}

void attention_axpys4(const float* const* p, const float* const* values, int64_t n_values, float* const* acc,
                      int64_t n) {
    int64_t j = 0;
    for (; j + 64 <= n; j += 64) {
        __m512 y[4][4];
        for (int m = 0; m < 4; ++m)
            for (int c = 0; c < 4; ++c) y[m][c] = _mm512_loadu_ps(acc[m] + j + 16 * c);
        for (int64_t t = 0; t < n_values; ++t) {
            const float* x = values[t] + j;
            const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16), v2 = _mm512_loadu_ps(x + 32),
                         v3 = _mm512_loadu_ps(x + 48);
#pragma GCC unroll 4
            for (int m = 0; m < 4; ++m) {
                const __m512 pv = _mm512_set1_ps(p[m][t]);
                y[m][0] = mul_add(y[m][0], pv, v0);
                y[m][1] = mul_add(y[m][1], pv, v1);
                y[m][2] = mul_add(y[m][2], pv, v2);
                y[m][3] = mul_add(y[m][3], pv, v3);
            }
        }
        for (int m = 0; m < 4; ++m)
            for (int c = 0; c < 4; ++c) _mm512_storeu_ps(acc[m] + j + 16 * c, y[m][c]);
    }
    for (; j < n; j += 16) {
        const __mmask16 mk = n - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - j)) - 1);
        for (int m = 0; m < 4; ++m) {
            __m512 y = _mm512_maskz_loadu_ps(mk, acc[m] + j);
            for (int64_t t = 0; t < n_values; ++t)
                y = mul_add(y, _mm512_set1_ps(p[m][t]), _mm512_maskz_loadu_ps(mk, values[t] + j));
            _mm512_mask_storeu_ps(acc[m] + j, mk, y);
        }
    }
}

}  // namespace sluice::ops::cpu::avx512
