// AVX2 + FMA + F16C matmul path: the same structure as the AVX-512 path with 8 lanes and a 4-weight-row x
// 3-input-row register tile (12 accumulators, 3 x vectors and a weight vector: all 16 ymm registers; 4 x 2 ran
// at 0.65x its speed on Zen 3, the weight loads outnumbering the FMAs' slack). Tails shorter than 8 use masked loads in
// the dot product and scalar code in the decoders. Values are bit-identical to the reference dequantiser.
#include <immintrin.h>

#include <cstring>

#include "ops/cpu/decode_dispatch.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/matmul_driver.h"
#include "ops/cpu/x86/avx2_common.h"
#include "ops/reference/dequantize_detail.h"

namespace sluice::ops::cpu::avx2 {

namespace {

constexpr int32_t kMaskWindow[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

inline float fp8_scalar(uint8_t v) {
    const uint32_t mag = v & 0x7F;
    float f = mag == 0x7F ? bits_to_f32(0x7fc00000u) : bits_to_f32(mag << 20) * 0x1p120f;
    return (v & 0x80) ? -f : f;
}

inline __m128i load_lo64(const uint8_t* p) { return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)); }

// INT4_G32: one block -> (q - 8) * scale rounded to bf16 (the fused kernel's vectors).
inline void store_int4(float* out, const uint8_t* p, uint16_t scale_bits) {
    __m256 v[4];
    int4_vectors(p, scale_bits, v);
    for (int q = 0; q < 4; ++q) _mm256_storeu_ps(out + 8 * q, v[q]);
}

// MXFP4: 32 codes in lookup order (avx2_common.h) -> +-E2M1 times the scale (the fused kernel's vectors).
inline void store_e2m1(float* out, __m256i codes, float scale) {
    __m256 v[4];
    e2m1_vectors(codes, _mm256_set1_ps(scale), v);
    for (int q = 0; q < 4; ++q) _mm256_storeu_ps(out + 8 * q, v[q]);
}

void decode_nibbles(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out) {
    const bool mx = w.format == WeightFormat::MXFP4;
    const uint8_t* q = w.data + uint64_t(r) * uint64_t(w.cols / 2);
    const uint64_t s0 = uint64_t(r) * uint64_t(w.cols / 32);
    for (int64_t c = c0; c < c0 + k; c += 32) {
        if (mx)
            store_e2m1(out + (c - c0), mx_codes(q + c / 2), e8m0(w.scales[s0 + c / 32]));
        else
            store_int4(out + (c - c0), q + c / 2, load_u16(w.scales + (s0 + c / 32) * 2));
    }
}

void decode_mxfp4_ggml(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out) {
    const uint8_t* row = w.data + uint64_t(r) * uint64_t(w.cols / 32) * ref::kMxfp4GgmlBlockBytes;
    for (int64_t c = c0; c < c0 + k; c += 32) {
        const uint8_t* b = row + (c / 32) * ref::kMxfp4GgmlBlockBytes;
        store_e2m1(out + (c - c0), mx_codes_ggml(b + 1), e8m0(b[0]));
    }
}

void decode_q8_0(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out) {
    const uint8_t* row = w.data + uint64_t(r) * uint64_t(w.cols / 32) * ref::kQ8_0BlockBytes;
    for (int64_t c = c0; c < c0 + k; c += 32) {
        const uint8_t* b = row + (c / 32) * ref::kQ8_0BlockBytes;
        const __m256 d = _mm256_set1_ps(_cvtsh_ss(load_u16(b)));
        for (int q = 0; q < 4; ++q) {
            const __m256i v = _mm256_cvtepi8_epi32(load_lo64(b + 2 + 8 * q));
            _mm256_storeu_ps(out + (c - c0) + 8 * q, _mm256_mul_ps(d, _mm256_cvtepi32_ps(v)));
        }
    }
}

void decode_16bit(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out) {
    const uint8_t* p = w.data + (uint64_t(r) * uint64_t(w.cols) + uint64_t(c0)) * 2;
    const bool bf16 = w.format == WeightFormat::BF16;
    int64_t c = 0;
    for (; c + 8 <= k; c += 8) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * c));
        _mm256_storeu_ps(
            out + c, bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)) : _mm256_cvtph_ps(h));
    }
    for (; c < k; ++c) {
        const uint16_t h = load_u16(p + 2 * c);
        out[c] = bf16 ? bits_to_f32(uint32_t(h) << 16) : _cvtsh_ss(h);
    }
}

void decode_fp8(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out) {
    const int64_t tiles_per_row = (w.cols + 127) / 128;
    const uint8_t* q = w.data + uint64_t(r) * uint64_t(w.cols);
    const uint8_t* srow = w.scales + uint64_t(r / 128) * uint64_t(tiles_per_row) * 4;
    const __m256 two120 = _mm256_set1_ps(0x1p120f);
    const __m256 nan = _mm256_set1_ps(__builtin_nanf(""));
    const __m256i m7f = _mm256_set1_epi32(0x7F), m80 = _mm256_set1_epi32(0x80);
    for (int64_t c = c0; c < c0 + k;) {
        float scale_f;
        std::memcpy(&scale_f, srow + (c / 128) * 4, 4);
        const __m256 scale = _mm256_set1_ps(scale_f);
        const int64_t end = imin(c0 + k, (c / 128 + 1) * 128);
        for (; c + 8 <= end; c += 8) {
            const __m256i v = _mm256_cvtepu8_epi32(load_lo64(q + c));
            const __m256i mag = _mm256_and_si256(v, m7f);
            __m256 f = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(mag, 20)), two120);
            f = _mm256_blendv_ps(f, nan, _mm256_castsi256_ps(_mm256_cmpeq_epi32(mag, m7f)));
            f = _mm256_or_ps(f, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(v, m80), 24)));
            _mm256_storeu_ps(out + (c - c0), _mm256_mul_ps(f, scale));
        }
        for (; c < end; ++c) out[c - c0] = fp8_scalar(q[c]) * scale_f;
    }
}

struct Kernel {
    static constexpr int kMr = 4;
    static constexpr int kNr = 3;

    static void decode(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out) {
        decode_by_format<decode_16bit, decode_fp8, decode_nibbles, decode_mxfp4_ggml, decode_q8_0>(w, r, c0, k, out);
    }

    template <int MR, int NR>
    static void tile(const float* const* wr, const float* x, int64_t ldx, int64_t k, float* out) {
        __m256 acc[MR][NR];
        for (int j = 0; j < MR; ++j)
            for (int i = 0; i < NR; ++i) acc[j][i] = _mm256_setzero_ps();
        int64_t c = 0;
        for (; c + 8 <= k; c += 8) {
            __m256 xv[NR];
            for (int i = 0; i < NR; ++i) xv[i] = _mm256_loadu_ps(x + i * ldx + c);
            for (int j = 0; j < MR; ++j) {
                const __m256 wv = _mm256_loadu_ps(wr[j] + c);
                for (int i = 0; i < NR; ++i) acc[j][i] = _mm256_fmadd_ps(wv, xv[i], acc[j][i]);
            }
        }
        if (c < k) {
            const __m256i m = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMaskWindow + 8 - (k - c)));
            __m256 xv[NR];
            for (int i = 0; i < NR; ++i) xv[i] = _mm256_maskload_ps(x + i * ldx + c, m);
            for (int j = 0; j < MR; ++j) {
                const __m256 wv = _mm256_maskload_ps(wr[j] + c, m);
                for (int i = 0; i < NR; ++i) acc[j][i] = _mm256_fmadd_ps(wv, xv[i], acc[j][i]);
            }
        }
        for (int j = 0; j < MR; ++j)
            for (int i = 0; i < NR; ++i) out[i * MR + j] = hsum(acc[j][i]);
    }
};

}  // namespace

void matmul_rows(const Weight& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1, float* scratch) {
    if (matmul_rows_fused(w, x, n, y, r0, r1)) return;  // one or two input rows (avx2_matvec.cpp): same bits
    matmul_rows_blocked<Kernel>(w, x, n, y, r0, r1, scratch);
}

void dequantize_range(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out) {
    Kernel::decode(w, r, c0, k, out);
}

}  // namespace sluice::ops::cpu::avx2
