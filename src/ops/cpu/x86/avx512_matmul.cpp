// AVX-512 matmul path (avx512f/bw/vl/dq + f16c): every format is dequantised 16 lanes at a time into the f32
// block scratch of the shared blocking loop, then a 4-weight-row x 4-input-row register tile of FMAs consumes it.
// Values are bit-identical to the reference dequantiser (exact conversions, one rounding for the scale product);
// Q4_K/Q6_K reuse the reference block decoders. Compiled with AVX-512 flags; called only when cpuid allows.
// GCC 12 warns about the _mm512_undefined_* inside its own intrinsic headers (a known false positive).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#include "ops/cpu/decode_dispatch.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/matmul_driver.h"
#include "ops/cpu/x86/round_bf16.h"
#include "ops/ops.h"
#include "ops/reference/dequantize_detail.h"

namespace sluice::ops::cpu::avx512 {

namespace {

constexpr float kInt4Values[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};

inline float e8m0(uint8_t v) {
    const uint32_t bits = v == 0 ? 0x00400000u : v == 0xFF ? 0x7fc00000u : uint32_t(v) << 23;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

inline float load_bf16(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    const uint32_t bits = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

inline float load_f16(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

inline __mmask16 tail_mask(int64_t m) { return __mmask16((1u << m) - 1u); }

// 16 bytes holding 32 nibbles, element 2j in the low nibble of byte j -> codes of elements 0..15, 16..31.
inline void nibbles_pairwise(const uint8_t* p, __m512i& e0, __m512i& e1) {
    const __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256i lo = _mm256_and_si256(w, _mm256_set1_epi16(0x0F));
    const __m256i hi = _mm256_srli_epi16(w, 4);
    const __m256i b = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 8));
    e0 = _mm512_cvtepu8_epi32(_mm256_castsi256_si128(b));
    e1 = _mm512_cvtepu8_epi32(_mm256_extracti128_si256(b, 1));
}

// Codes e0, e1 (16 each) looked up in table times scale; `round`: the products rounded to bf16 (INT4_G32).
inline void store_lut(float* out, __m512i e0, __m512i e1, __m512 table, float scale, bool round = false) {
    __m512 st = _mm512_mul_ps(table, _mm512_set1_ps(scale));
    if (round) st = round_bf16_ps(st);
    _mm512_storeu_ps(out, _mm512_permutexvar_ps(e0, st));
    _mm512_storeu_ps(out + 16, _mm512_permutexvar_ps(e1, st));
}

void decode_fp8(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out) {
    const int64_t tiles_per_row = (w.cols + 127) / 128;
    const uint8_t* q = w.data + uint64_t(r) * uint64_t(w.cols);
    const uint8_t* srow = w.scales + uint64_t(r / 128) * uint64_t(tiles_per_row) * 4;
    const __m512 two120 = _mm512_set1_ps(0x1p120f);
    const __m512 nan = _mm512_set1_ps(__builtin_nanf(""));
    const __m512i m7f = _mm512_set1_epi32(0x7F), m80 = _mm512_set1_epi32(0x80);
    for (int64_t c = c0; c < c0 + k;) {
        float scale_f;
        std::memcpy(&scale_f, srow + (c / 128) * 4, 4);
        const __m512 scale = _mm512_set1_ps(scale_f);
        const int64_t end = imin(c0 + k, (c / 128 + 1) * 128);
        for (; c < end; c += 16) {
            const __mmask16 m = end - c >= 16 ? __mmask16(0xFFFF) : tail_mask(end - c);
            const __m512i v = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, q + c));
            const __m512i mag = _mm512_and_si512(v, m7f);
            // (exponent, mantissa) shifted into an f32 lands 120 binades low, subnormals included.
            __m512 f = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(mag, 20)), two120);
            f = _mm512_mask_mov_ps(f, _mm512_cmpeq_epi32_mask(mag, m7f), nan);
            f = _mm512_castsi512_ps(
                _mm512_or_si512(_mm512_castps_si512(f), _mm512_slli_epi32(_mm512_and_si512(v, m80), 24)));
            _mm512_mask_storeu_ps(out + (c - c0), m, _mm512_mul_ps(f, scale));
        }
    }
}

void decode_16bit(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out) {
    const uint8_t* p = w.data + (uint64_t(r) * uint64_t(w.cols) + uint64_t(c0)) * 2;
    const bool bf16 = w.format == WeightFormat::BF16;
    for (int64_t c = 0; c < k; c += 16) {
        const __mmask16 m = k - c >= 16 ? __mmask16(0xFFFF) : tail_mask(k - c);
        const __m256i h = _mm256_maskz_loadu_epi16(m, p + 2 * c);
        const __m512 f = bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
                              : _mm512_cvtph_ps(h);
        _mm512_mask_storeu_ps(out + c, m, f);
    }
}

void decode_nibbles(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out) {
    const bool mx = w.format == WeightFormat::MXFP4;
    const __m512 table = _mm512_loadu_ps(mx ? ref::kE2M1Values : kInt4Values);
    const uint8_t* q = w.data + uint64_t(r) * uint64_t(w.cols / 2);
    const uint64_t s0 = uint64_t(r) * uint64_t(w.cols / 32);
    __m512i e0, e1;
    for (int64_t c = c0; c < c0 + k; c += 32) {
        nibbles_pairwise(q + c / 2, e0, e1);
        const float scale = mx ? e8m0(w.scales[s0 + c / 32]) : load_bf16(w.scales + (s0 + c / 32) * 2);
        store_lut(out + (c - c0), e0, e1, table, scale, !mx);
    }
}

void decode_mxfp4_ggml(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out) {
    const __m512 table = _mm512_loadu_ps(ref::kE2M1Values);
    const uint8_t* row = w.data + uint64_t(r) * uint64_t(w.cols / 32) * ref::kMxfp4GgmlBlockBytes;
    for (int64_t c = c0; c < c0 + k; c += 32) {
        const uint8_t* b = row + (c / 32) * ref::kMxfp4GgmlBlockBytes;
        const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 1)));
        store_lut(out + (c - c0), _mm512_and_si512(v, _mm512_set1_epi32(0xF)), _mm512_srli_epi32(v, 4), table,
                  e8m0(b[0]));
    }
}

void decode_q8_0(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out) {
    const uint8_t* row = w.data + uint64_t(r) * uint64_t(w.cols / 32) * ref::kQ8_0BlockBytes;
    for (int64_t c = c0; c < c0 + k; c += 32) {
        const uint8_t* b = row + (c / 32) * ref::kQ8_0BlockBytes;
        const __m512 d = _mm512_set1_ps(load_f16(b));
        for (int h = 0; h < 2; ++h) {
            const __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 + 16 * h)));
            _mm512_storeu_ps(out + (c - c0) + 16 * h, _mm512_mul_ps(d, _mm512_cvtepi32_ps(q)));
        }
    }
}

// The sums of the 16 lanes of v[0..15], lane 4k + m of the result being v[4m + k]'s, each added in the order of
// _mm512_reduce_add_ps (lanes l and l + 8, then those sums' l and l + 4, then l and l + 2, then the two left: a
// fixed tree, so the same bits) but the 16 at once: 45 shuffles and adds where 16 reductions one by one take ~140.
inline __m512 reduce_add_16(const __m512* v) {
    __m512 w[8], u[4], s[2];
    for (int m = 0; m < 8; ++m)  // [a0+a2, a1+a3, b0+b2, b1+b3] in 128-bit blocks: vectors 2m and 2m+1, 8 lanes each
        w[m] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * m], v[2 * m + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(v[2 * m], v[2 * m + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int p = 0; p < 4; ++p)  // block k: vector 4p + k, 4 lanes
        u[p] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * p], w[2 * p + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(w[2 * p], w[2 * p + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    for (int p = 0; p < 2; ++p)  // block k: lanes 0-1 vector 8p + k, lanes 2-3 vector 8p + 4 + k
        s[p] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * p], u[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(u[2 * p], u[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    // block k, lane m: vector 4m + k
    return _mm512_add_ps(_mm512_shuffle_ps(s[0], s[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_ps(s[0], s[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

struct Kernel {
    static constexpr int kMr = 4;
    static constexpr int kNr = 4;

    static void decode(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out) {
        decode_by_format<decode_16bit, decode_fp8, decode_nibbles, decode_mxfp4_ggml, decode_q8_0>(w, r, c0, k, out);
    }

    template <int MR, int NR>
    static void tile(const float* const* wr, const float* x, int64_t ldx, int64_t k, float* out) {
        __m512 acc[MR][NR];
        for (int j = 0; j < MR; ++j)
            for (int i = 0; i < NR; ++i) acc[j][i] = _mm512_setzero_ps();
        int64_t c = 0;
        for (; c + 16 <= k; c += 16) {
            __m512 xv[NR];
            for (int i = 0; i < NR; ++i) xv[i] = _mm512_loadu_ps(x + i * ldx + c);
            for (int j = 0; j < MR; ++j) {
                const __m512 wv = _mm512_loadu_ps(wr[j] + c);
                for (int i = 0; i < NR; ++i) acc[j][i] = _mm512_fmadd_ps(wv, xv[i], acc[j][i]);
            }
        }
        if (c < k) {
            const __mmask16 m = tail_mask(k - c);
            __m512 xv[NR];
            for (int i = 0; i < NR; ++i) xv[i] = _mm512_maskz_loadu_ps(m, x + i * ldx + c);
            for (int j = 0; j < MR; ++j) {
                const __m512 wv = _mm512_maskz_loadu_ps(m, wr[j] + c);
                for (int i = 0; i < NR; ++i) acc[j][i] = _mm512_fmadd_ps(wv, xv[i], acc[j][i]);
            }
        }
        if constexpr (MR == 4 && NR == 4) {  // acc[j][i] is v[4j + i]: its sum lands in lane 4i + j = i * MR + j
            _mm512_storeu_ps(out, reduce_add_16(&acc[0][0]));
        } else {
            for (int j = 0; j < MR; ++j)
                for (int i = 0; i < NR; ++i) out[i * MR + j] = _mm512_reduce_add_ps(acc[j][i]);
        }
    }
};

}  // namespace

void matmul_rows(const Weight& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1, float* scratch) {
    // ops::avx512_vbmi() off (SLUICE_AVX512_VBMI=0, or a test) keeps a CPU with VBMI on the plain AVX-512 few-row
    // decoders (avx512_matvec.cpp), to test and measure them where no AVX-512 CPU without VBMI is at hand.
    if (ops::avx512_vbmi() && matmul_rows_fused_vbmi(w, x, n, y, r0, r1)) return;
    if (matmul_rows_fused(w, x, n, y, r0, r1)) return;
    matmul_rows_blocked<Kernel>(w, x, n, y, r0, r1, scratch);
}

void dequantize_range(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out) {
    Kernel::decode(w, r, c0, k, out);
}

}  // namespace sluice::ops::cpu::avx512
