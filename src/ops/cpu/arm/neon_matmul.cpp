// AArch64 Advanced SIMD (NEON) matmul path: the portable path's bits, for every weight format, exactly.
//
// The portable kernel (portable_matmul.cpp) sums each dot product in 16 lanes, lane l taking columns c = l mod 16 of
// a kChunkCols chunk, each step one fused multiply-add on AArch64; the lanes are then added in a fixed tree (8, 4,
// 2, 1) and the chunks in column order (matmul_driver.h). Here lanes 4q..4q+3 are one float32x4 accumulator, and
// each quarter q is one pass over the chunk (the quarters are independent sums, so the passes may run one after
// another): a 4-weight-row x 4-input-row tile then needs 16 accumulators, 4 x vectors and a weight vector of the 32
// registers. vfmaq_f32 is the fused multiply-add the portable loop spells as std::fma; the last k mod 16 columns go
// to their lanes in scalar code, and the lane tree is the portable one in scalar code. So every output element is
// the same sequence of IEEE operations on either path.
//
// Decoders give the reference dequantiser's floats bit for bit (table lookups for the 4-bit codes, exact widening
// for 16-bit and FP8, one multiply by the scale as the reference does); Q4_K and Q6_K use the reference decoder, as
// the x86 paths do. Compiled with the baseline AArch64 flags: NEON is part of every AArch64 CPU, and the kernels use
// no extension (the int8 dot products and bf16 dot/matrix products round otherwise: docs/arm64.md).
#include <arm_neon.h>

#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "ops/cpu/decode_dispatch.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/matmul_driver.h"
#include "ops/reference/dequantize_detail.h"

namespace sluice::ops::cpu::neon {

namespace {

inline uint16_t load_u16(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return h;
}

inline uint16x8_t load_u16x8(const uint8_t* p) { return vreinterpretq_u16_u8(vld1q_u8(p)); }

// 8 bf16 bit patterns (u16) -> 8 floats at out (exact: the high halves).
inline void store_bf16x8(float* out, uint16x8_t h) {
    vst1q_f32(out, vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16)));
    vst1q_f32(out + 4, vreinterpretq_f32_u32(vshll_high_n_u16(h, 16)));
}

// 8 f16 bit patterns -> 8 floats as f16_to_f32 gives them: fcvtl is exact, but it quiets a signalling NaN, which
// the reference keeps signalling (its payload shifted up 13 bits): clear the quiet bit again for those.
inline void store_f16x8(float* out, uint16x8_t h) {
    const uint16x8_t snan = vandq_u16(vceqq_u16(vandq_u16(h, vdupq_n_u16(0x7E00)), vdupq_n_u16(0x7C00)),
                                      vtstq_u16(h, vdupq_n_u16(0x01FF)));
    const uint32x4_t m_lo = vreinterpretq_u32_s32(vmovl_s16(vreinterpret_s16_u16(vget_low_u16(snan))));
    const uint32x4_t m_hi = vreinterpretq_u32_s32(vmovl_high_s16(vreinterpretq_s16_u16(snan)));
    const uint32x4_t quiet = vdupq_n_u32(0x00400000u);
    const uint32x4_t lo = vreinterpretq_u32_f32(vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h))));
    const uint32x4_t hi = vreinterpretq_u32_f32(vcvt_high_f32_f16(vreinterpretq_f16_u16(h)));
    vst1q_f32(out, vreinterpretq_f32_u32(vbicq_u32(lo, vandq_u32(m_lo, quiet))));
    vst1q_f32(out + 4, vreinterpretq_f32_u32(vbicq_u32(hi, vandq_u32(m_hi, quiet))));
}

void decode_16bit(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out) {
    const uint8_t* p = w.data + (uint64_t(r) * uint64_t(w.cols) + uint64_t(c0)) * 2;
    const bool bf16 = w.format == WeightFormat::BF16;
    int64_t c = 0;
    if (bf16)
        for (; c + 8 <= k; c += 8) store_bf16x8(out + c, load_u16x8(p + 2 * c));
    else
        for (; c + 8 <= k; c += 8) store_f16x8(out + c, load_u16x8(p + 2 * c));
    for (; c < k; ++c) {
        const uint16_t h = load_u16(p + 2 * c);
        out[c] = bf16 ? bf16_to_f32(h) : f16_to_f32(h);
    }
}

// FP8 E4M3 as fp8_e4m3_to_f32 gives it, times the tile's scale: the magnitude bits moved to an f32's exponent and
// mantissa (subnormal codes land on f32 subnormals) times 2^120 is exact; S.1111.111 is the positive quiet NaN the
// reference returns whatever the sign; the sign is or-ed in (so code 0x80 is -0, as -1.0f * 0 is).
void decode_fp8(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out) {
    const int64_t tiles_per_row = (w.cols + 127) / 128;
    const uint8_t* q = w.data + uint64_t(r) * uint64_t(w.cols);
    const uint8_t* srow = w.scales + uint64_t(r / 128) * uint64_t(tiles_per_row) * 4;
    const float32x4_t two120 = vdupq_n_f32(0x1p120f);
    const uint32x4_t nan = vdupq_n_u32(0x7FC00000u), m7f = vdupq_n_u32(0x7F), m80 = vdupq_n_u32(0x80);
    for (int64_t c = c0; c < c0 + k;) {
        float scale_f;
        std::memcpy(&scale_f, srow + (c / 128) * 4, 4);
        const float32x4_t scale = vdupq_n_f32(scale_f);
        const int64_t end = imin(c0 + k, (c / 128 + 1) * 128);
        for (; c + 8 <= end; c += 8) {
            const uint16x8_t b = vmovl_u8(vld1_u8(q + c));
            for (int h = 0; h < 2; ++h) {
                const uint32x4_t v = h == 0 ? vmovl_u16(vget_low_u16(b)) : vmovl_high_u16(b);
                const uint32x4_t mag = vandq_u32(v, m7f);
                const float32x4_t f = vmulq_f32(vreinterpretq_f32_u32(vshlq_n_u32(mag, 20)), two120);
                const uint32x4_t signed_f =
                    vorrq_u32(vreinterpretq_u32_f32(f), vshlq_n_u32(vandq_u32(v, m80), 24));
                const uint32x4_t val = vbslq_u32(vceqq_u32(mag, m7f), nan, signed_f);
                vst1q_f32(out + (c - c0) + 4 * h, vmulq_f32(vreinterpretq_f32_u32(val), scale));
            }
        }
        for (; c < end; ++c) out[c - c0] = fp8_e4m3_to_f32(q[c]) * scale_f;
    }
}

// E2M1 codes (code 8 is -0) as bf16 = the high half of their f32, split into low and high bytes for two lookups.
constexpr uint8_t kE2M1Bf16Lo[16] = {0x00, 0x00, 0x80, 0xC0, 0x00, 0x40, 0x80, 0xC0,
                                     0x00, 0x00, 0x80, 0xC0, 0x00, 0x40, 0x80, 0xC0};
constexpr uint8_t kE2M1Bf16Hi[16] = {0x00, 0x3F, 0x3F, 0x3F, 0x40, 0x40, 0x40, 0x40,
                                     0x80, 0xBF, 0xBF, 0xBF, 0xC0, 0xC0, 0xC0, 0xC0};

// 16 codes (one a byte) -> the 16 floats of a 16-entry bf16 table given as its low and high bytes (times scale
// when Scaled: the value times the scale, one rounding, as the reference computes it).
template <bool Scaled>
inline void lookup16(uint8x16_t codes, uint8x16_t table_lo, uint8x16_t table_hi, float32x4_t scale, float* out) {
    const uint8x16_t lo = vqtbl1q_u8(table_lo, codes), hi = vqtbl1q_u8(table_hi, codes);
    const uint16x8_t w0 = vreinterpretq_u16_u8(vzip1q_u8(lo, hi)), w1 = vreinterpretq_u16_u8(vzip2q_u8(lo, hi));
    const float32x4_t v[4] = {vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(w0), 16)),
                              vreinterpretq_f32_u32(vshll_high_n_u16(w0, 16)),
                              vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(w1), 16)),
                              vreinterpretq_f32_u32(vshll_high_n_u16(w1, 16))};
    for (int q = 0; q < 4; ++q) vst1q_f32(out + 4 * q, Scaled ? vmulq_f32(v[q], scale) : v[q]);
}

// 16 bytes of nibbles, element 2j in the low nibble of byte j (MXFP4, INT4_G32) -> 32 looked-up floats.
template <bool Scaled>
inline void lookup_nibbles(const uint8_t* p, uint8x16_t table_lo, uint8x16_t table_hi, float32x4_t scale,
                           float* out) {
    const uint8x16_t b = vld1q_u8(p), mask = vdupq_n_u8(0x0F);
    const uint8x16_t lo = vandq_u8(b, mask), hi = vshrq_n_u8(b, 4);
    lookup16<Scaled>(vzip1q_u8(lo, hi), table_lo, table_hi, scale, out);
    lookup16<Scaled>(vzip2q_u8(lo, hi), table_lo, table_hi, scale, out + 16);
}

// f32 lanes -> their bf16 roundings as f32_to_bf16 gives them (nearest even; a NaN keeps its high half, quieted).
inline uint16x4_t round_bf16(float32x4_t f) {
    const uint32x4_t b = vreinterpretq_u32_f32(f);
    const uint32x4_t rounded =
        vshrq_n_u32(vaddq_u32(vaddq_u32(b, vdupq_n_u32(0x7FFF)), vandq_u32(vshrq_n_u32(b, 16), vdupq_n_u32(1))), 16);
    const uint32x4_t nan = vorrq_u32(vshrq_n_u32(b, 16), vdupq_n_u32(0x40));
    return vmovn_u32(vbslq_u32(vceqq_f32(f, f), rounded, nan));
}

constexpr float kInt4Values[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};  // stored nibble - 8

// INT4_G32: the block's 16 values (q - 8) * scale rounded to bf16, as a byte-split table, then the lookups.
inline void decode_int4_block(const uint8_t* p, uint16_t scale_bits, float* out) {
    const float32x4_t sc = vdupq_n_f32(bf16_to_f32(scale_bits));
    uint16x4_t h[4];
    for (int q = 0; q < 4; ++q) h[q] = round_bf16(vmulq_f32(vld1q_f32(kInt4Values + 4 * q), sc));
    const uint8x16_t a = vreinterpretq_u8_u16(vcombine_u16(h[0], h[1])), b = vreinterpretq_u8_u16(vcombine_u16(h[2], h[3]));
    lookup_nibbles<false>(p, vuzp1q_u8(a, b), vuzp2q_u8(a, b), sc, out);
}

void decode_nibbles(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out) {
    const uint8_t* q = w.data + uint64_t(r) * uint64_t(w.cols / 2);
    const uint64_t s0 = uint64_t(r) * uint64_t(w.cols / 32);
    if (w.format == WeightFormat::MXFP4) {
        const uint8x16_t tlo = vld1q_u8(kE2M1Bf16Lo), thi = vld1q_u8(kE2M1Bf16Hi);
        for (int64_t c = c0; c < c0 + k; c += 32)
            lookup_nibbles<true>(q + c / 2, tlo, thi, vdupq_n_f32(ref::e8m0_value(w.scales[s0 + c / 32])), out + (c - c0));
    } else {
        for (int64_t c = c0; c < c0 + k; c += 32)
            decode_int4_block(q + c / 2, load_u16(w.scales + (s0 + c / 32) * 2), out + (c - c0));
    }
}

// ggml MXFP4 blocks {e8m0, qs[16]}: qs[j] & 15 is element j, qs[j] >> 4 element j + 16.
void decode_mxfp4_ggml(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out) {
    const uint8_t* row = w.data + uint64_t(r) * uint64_t(w.cols / 32) * ref::kMxfp4GgmlBlockBytes;
    const uint8x16_t tlo = vld1q_u8(kE2M1Bf16Lo), thi = vld1q_u8(kE2M1Bf16Hi), mask = vdupq_n_u8(0x0F);
    for (int64_t c = c0; c < c0 + k; c += 32) {
        const uint8_t* b = row + (c / 32) * ref::kMxfp4GgmlBlockBytes;
        const float32x4_t scale = vdupq_n_f32(ref::e8m0_value(b[0]));
        const uint8x16_t qs = vld1q_u8(b + 1);
        lookup16<true>(vandq_u8(qs, mask), tlo, thi, scale, out + (c - c0));
        lookup16<true>(vshrq_n_u8(qs, 4), tlo, thi, scale, out + (c - c0) + 16);
    }
}

// Q8_0 blocks {f16 d, int8 qs[32]}: d * q.
void decode_q8_0(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out) {
    const uint8_t* row = w.data + uint64_t(r) * uint64_t(w.cols / 32) * ref::kQ8_0BlockBytes;
    for (int64_t c = c0; c < c0 + k; c += 32) {
        const uint8_t* b = row + (c / 32) * ref::kQ8_0BlockBytes;
        const float32x4_t d = vdupq_n_f32(f16_to_f32(load_u16(b)));
        for (int h = 0; h < 2; ++h) {
            const int8x16_t v = vreinterpretq_s8_u8(vld1q_u8(b + 2 + 16 * h));
            const int16x8_t v0 = vmovl_s8(vget_low_s8(v)), v1 = vmovl_high_s8(v);
            const int32x4_t q[4] = {vmovl_s16(vget_low_s16(v0)), vmovl_high_s16(v0), vmovl_s16(vget_low_s16(v1)),
                                    vmovl_high_s16(v1)};
            for (int i = 0; i < 4; ++i)
                vst1q_f32(out + (c - c0) + 16 * h + 4 * i, vmulq_f32(d, vcvtq_f32_s32(q[i])));
        }
    }
}

struct Kernel {
    static constexpr int kMr = 4;
    static constexpr int kNr = 4;

    static void decode(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out) {
        decode_by_format<decode_16bit, decode_fp8, decode_nibbles, decode_mxfp4_ggml, decode_q8_0>(w, r, c0, k, out);
    }

    // out[i * MR + j] = the portable tile's dot(wr[j][0:k], x[i * ldx + 0:k]), bit for bit.
    template <int MR, int NR>
    static void tile(const float* const* wr, const float* x, int64_t ldx, int64_t k, float* out) {
        constexpr int L = 16;
        float acc[MR][NR][L];
        const int64_t whole = k / L * L;
        for (int q = 0; q < 4; ++q) {  // lanes 4q..4q+3: columns c with c mod 16 in that range
            float32x4_t a[MR][NR];
            for (int j = 0; j < MR; ++j)
                for (int i = 0; i < NR; ++i) a[j][i] = vdupq_n_f32(0.0f);
            for (int64_t c = 4 * q; c < whole; c += L) {
                float32x4_t xv[NR];
                for (int i = 0; i < NR; ++i) xv[i] = vld1q_f32(x + i * ldx + c);
                for (int j = 0; j < MR; ++j) {
                    const float32x4_t wv = vld1q_f32(wr[j] + c);
                    for (int i = 0; i < NR; ++i) a[j][i] = vfmaq_f32(a[j][i], wv, xv[i]);
                }
            }
            for (int j = 0; j < MR; ++j)
                for (int i = 0; i < NR; ++i) vst1q_f32(acc[j][i] + 4 * q, a[j][i]);
        }
        for (int j = 0; j < MR; ++j)
            for (int i = 0; i < NR; ++i) {
                float* s = acc[j][i];
                for (int64_t t = whole; t < k; ++t) s[t - whole] = std::fma(wr[j][t], x[i * ldx + t], s[t - whole]);
                for (int width = L / 2; width >= 1; width /= 2)
                    for (int l = 0; l < width; ++l) s[l] += s[l + width];
                out[i * MR + j] = s[0];
            }
    }
};

}  // namespace

void matmul_rows(const Weight& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1, float* scratch) {
    matmul_rows_blocked<Kernel>(w, x, n, y, r0, r1, scratch);
}

void dequantize_range(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out) {
    Kernel::decode(w, r, c0, k, out);
}

double fma_probe(int64_t iterations) {
    constexpr int kChains = 16;
    float32x4_t acc[kChains];
#pragma GCC unroll 16
    for (int c = 0; c < kChains; ++c) acc[c] = vdupq_n_f32(float(c));
    // 1 and 0 through a volatile, no asm barrier (see x86/avx2_fma_probe.cpp: a barrier on the array's elements kept
    // the chains in memory)
    volatile float one_f = 1.0f, zero_f = 0.0f;
    const float32x4_t one = vdupq_n_f32(one_f), zero = vdupq_n_f32(zero_f);
    for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
        for (int c = 0; c < kChains; ++c) acc[c] = vfmaq_f32(acc[c], zero, one);  // acc + 0 * 1: fmla's own form
    }
    float32x4_t s = vdupq_n_f32(0.0f);
#pragma GCC unroll 16
    for (int c = 0; c < kChains; ++c) s = vaddq_f32(s, acc[c]);
    volatile float sink = vgetq_lane_f32(s, 0);
    (void)sink;
    return double(iterations) * kChains * 4 * 2;
}

}  // namespace sluice::ops::cpu::neon
