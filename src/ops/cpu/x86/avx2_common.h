// Helpers shared by the AVX2 kernel files (avx2_matmul.cpp, avx2_matvec.cpp), compiled into each with its AVX2
// flags (internal linkage, as matmul_driver.h). hsum is the horizontal add of both kernels' accumulators: the
// one- and two-row kernel gives the blocked path's bits only because it is the same function.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "ops/cpu/int4_mantissa.h"

namespace sluice::ops::cpu::avx2 {
namespace {

// E2M1 codes (sign in bit 3: code 8 is -0) as bf16 = the high half of their f32 (+-{0, 0.5, 1, 1.5, 2, 3, 4, 6}), split
// into low and high bytes for two vpshufb lookups; each table in both 128-bit lanes.
alignas(32) constexpr uint8_t kE2M1Bf16Lo[32] = {0x00, 0x00, 0x80, 0xC0, 0x00, 0x40, 0x80, 0xC0, 0x00, 0x00, 0x80,
                                                 0xC0, 0x00, 0x40, 0x80, 0xC0, 0x00, 0x00, 0x80, 0xC0, 0x00, 0x40,
                                                 0x80, 0xC0, 0x00, 0x00, 0x80, 0xC0, 0x00, 0x40, 0x80, 0xC0};
alignas(32) constexpr uint8_t kE2M1Bf16Hi[32] = {0x00, 0x3F, 0x3F, 0x3F, 0x40, 0x40, 0x40, 0x40, 0x80, 0xBF, 0xBF,
                                                 0xBF, 0xC0, 0xC0, 0xC0, 0xC0, 0x00, 0x3F, 0x3F, 0x3F, 0x40, 0x40,
                                                 0x40, 0x40, 0x80, 0xBF, 0xBF, 0xBF, 0xC0, 0xC0, 0xC0, 0xC0};

// "Lookup order" of a block's 32 codes, the order e2m1_vectors takes them in: lane 0 holds elements 0-3, 8-11,
// 16-19, 24-27 and lane 1 elements 4-7, 12-15, 20-23, 28-31, so that the in-lane unpacks that widen bytes to bf16
// words and words to f32 give vectors of elements 0-7, 8-15, 16-23 and 24-31.
// Compressed-tensors nibbles (element 2j low in byte j): vpshufb moves byte j to the low byte of the word its two
// elements occupy; the nibbles are then split within the word.
alignas(32) constexpr uint8_t kMxWordSource[32] = {0,    0x80, 1,    0x80, 4,    0x80, 5,    0x80, 8,    0x80, 9,
                                                   0x80, 12,   0x80, 13,   0x80, 2,    0x80, 3,    0x80, 6,    0x80,
                                                   7,    0x80, 10,   0x80, 11,   0x80, 14,   0x80, 15,   0x80};
// ggml nibbles (element j low and element j + 16 high in qs[j]): positions 0-7 of a lane take low nibbles, 8-15
// high ones.
alignas(32) constexpr uint8_t kGgmlSource[32] = {0, 1, 2, 3, 8,  9,  10, 11, 0, 1, 2, 3, 8,  9,  10, 11,
                                                 4, 5, 6, 7, 12, 13, 14, 15, 4, 5, 6, 7, 12, 13, 14, 15};

inline float bits_to_f32(uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

inline float e8m0(uint8_t v) { return bits_to_f32(v == 0 ? 0x00400000u : v == 0xFF ? 0x7fc00000u : uint32_t(v) << 23); }

inline uint16_t load_u16(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return h;
}

// 16 bytes of packed nibbles (element 2j in the low nibble of byte j: MXFP4 and INT4_G32) -> 32 codes in lookup
// order (see kMxWordSource).
inline __m256i mx_codes(const uint8_t* p) {
    const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256i w16 = _mm256_shuffle_epi8(b, _mm256_load_si256(reinterpret_cast<const __m256i*>(kMxWordSource)));
    return _mm256_and_si256(_mm256_or_si256(w16, _mm256_slli_epi16(w16, 4)), _mm256_set1_epi8(0x0F));
}

// A ggml MXFP4 block's qs[16] -> 32 codes in lookup order (see kGgmlSource).
inline __m256i mx_codes_ggml(const uint8_t* qs) {
    const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
    const __m256i t = _mm256_shuffle_epi8(b, _mm256_load_si256(reinterpret_cast<const __m256i*>(kGgmlSource)));
    return _mm256_and_si256(_mm256_blend_epi32(t, _mm256_srli_epi16(t, 4), 0xCC), _mm256_set1_epi8(0x0F));
}

// 32 codes in lookup order -> the four vectors (elements 0-7, 8-15, 16-23, 24-31) of the bf16 values of a 16-entry
// table given as its low-byte and high-byte halves (each in both lanes).
inline void bf16_table_vectors(__m256i codes, __m256i table_lo, __m256i table_hi, __m256* v) {
    const __m256i lo = _mm256_shuffle_epi8(table_lo, codes), hi = _mm256_shuffle_epi8(table_hi, codes);
    const __m256i w0 = _mm256_unpacklo_epi8(lo, hi), w1 = _mm256_unpackhi_epi8(lo, hi), z = _mm256_setzero_si256();
    v[0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, w0));
    v[1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, w0));
    v[2] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, w1));
    v[3] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, w1));
}

// 32 codes in lookup order -> the four vectors of +-E2M1 (exact bf16s) times the block scale. Nine in-lane
// shuffles; the vcvtph2ps route it replaced took thirteen and ran 17% slower.
inline void e2m1_vectors(__m256i codes, __m256 scale, __m256* v) {
    bf16_table_vectors(codes, _mm256_load_si256(reinterpret_cast<const __m256i*>(kE2M1Bf16Lo)),
                       _mm256_load_si256(reinterpret_cast<const __m256i*>(kE2M1Bf16Hi)), v);
    for (int q = 0; q < 4; ++q) v[q] = _mm256_mul_ps(v[q], scale);
}

alignas(32) constexpr float kInt4Negative[8] = {-8, -7, -6, -5, -4, -3, -2, -1};  // codes 0..7
alignas(32) constexpr float kInt4Positive[8] = {0, 1, 2, 3, 4, 5, 6, 7};          // codes 8..15
// vpshufb indices taking, in each lane, the low bytes of 8 words to bytes 0-7 and their high bytes to 8-15.
alignas(32) constexpr uint8_t kSplitWordBytes[32] = {0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15,
                                                     0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15};

// round_bf16_ps without its NaN guard, for products of two bf16 values (low 16 bits zero). Such a product's NaN
// keeps its low 16 bits zero (an operand's payload, or the default NaN), so the rounding add cannot carry out of
// the mantissa: the same bits as round_bf16_ps, in 5 instructions instead of 8.
inline __m256 round_bf16_product(__m256 f) {
    const __m256i b = _mm256_castps_si256(f);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
    return _mm256_castsi256_ps(_mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7FFF)), lsb),
                                                _mm256_set1_epi32(int(0xFFFF0000u))));
}

// A block of 32 INT4_G32 codes (16 bytes) in table form (ops/cpu/int4_mantissa.h), for a scale in its range: the scale's mantissa m
// picks the byte tables of the 16 values bf16((q - 8)(1 + m/128)), and one multiply applies the scale's sign and
// power of two. The same bits as the multiply-and-round below, at MXFP4's cost.
inline void int4_table_vectors(const uint8_t* p, unsigned m, __m256 power, __m256* v) {
    bf16_table_vectors(
        mx_codes(p), _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(kInt4Mantissa.bf16_lo[m]))),
        _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(kInt4Mantissa.bf16_hi[m]))), v);
    for (int q = 0; q < 4; ++q) v[q] = _mm256_mul_ps(v[q], power);
}

// A block of 32 INT4_G32 codes (16 bytes) and its bf16 scale -> the four vectors of (q - 8) * scale rounded to
// bf16: in table form when the scale allows; else the 16 values are built as bf16s, their high halves as words (lane 0
// codes 0-3, 8-11; lane 1 4-7, 12-15), reordered to codes 0-7 | 8-15, split into low bytes | high bytes per lane,
// each byte table copied to both lanes.
inline void int4_vectors(const uint8_t* p, uint16_t scale_bits, __m256* v) {
    if (int4_scale_in_table_range(scale_bits))
        return int4_table_vectors(p, scale_bits & 0x7Fu, _mm256_set1_ps(bits_to_f32(int4_scale_power_bits(scale_bits))),
                                  v);
    const __m256 sc = _mm256_set1_ps(bits_to_f32(uint32_t(scale_bits) << 16));
    const __m256 neg = round_bf16_product(_mm256_mul_ps(_mm256_load_ps(kInt4Negative), sc));
    const __m256 pos = round_bf16_product(_mm256_mul_ps(_mm256_load_ps(kInt4Positive), sc));
    const __m256i words = _mm256_permute4x64_epi64(_mm256_packus_epi32(_mm256_srli_epi32(_mm256_castps_si256(neg), 16),
                                                                       _mm256_srli_epi32(_mm256_castps_si256(pos), 16)),
                                                   0xD8);
    const __m256i split =
        _mm256_shuffle_epi8(words, _mm256_load_si256(reinterpret_cast<const __m256i*>(kSplitWordBytes)));
    bf16_table_vectors(mx_codes(p), _mm256_permute4x64_epi64(split, 0x88), _mm256_permute4x64_epi64(split, 0xDD), v);
}

inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

}  // namespace
}  // namespace sluice::ops::cpu::avx2
