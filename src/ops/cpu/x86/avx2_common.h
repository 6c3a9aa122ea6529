// Helpers shared by the AVX2 kernel files (avx2_matmul.cpp, avx2_matvec.cpp), compiled into each with its AVX2
// flags (internal linkage, as matmul_driver.h). hsum is the horizontal add of both kernels' accumulators: the
// one- and two-row kernel gives the blocked path's bits only because it is the same function.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace sluice::ops::cpu::avx2 {
namespace {

// The high byte of the f16 of each E2M1 code, sign in code bit 3 (+-{0, 0.5, 1, 1.5, 2, 3, 4, 6}: their f16 low
// bytes are zero, so a vpshufb lookup and a byte shift into words make exact f16s for vcvtph2ps), in both lanes.
alignas(32) constexpr uint8_t kF16E2M1[32] = {0x00, 0x38, 0x3C, 0x3E, 0x40, 0x42, 0x44, 0x46,
                                              0x80, 0xB8, 0xBC, 0xBE, 0xC0, 0xC2, 0xC4, 0xC6,
                                              0x00, 0x38, 0x3C, 0x3E, 0x40, 0x42, 0x44, 0x46,
                                              0x80, 0xB8, 0xBC, 0xBE, 0xC0, 0xC2, 0xC4, 0xC6};

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

// 16 bytes of packed nibbles (element 2j in the low nibble of byte j) -> 32 code bytes in element order.
inline __m256i nibble_codes(const uint8_t* p) {
    const __m256i w16 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_and_si256(_mm256_or_si256(w16, _mm256_slli_epi16(w16, 4)), _mm256_set1_epi8(0x0F));
}

// 32 code bytes in element order -> the four vectors of +-E2M1 (exact through f16) times the block scale.
inline void e2m1_vectors(__m256i codes, __m256 scale, __m256* v) {
    const __m256i hib = _mm256_shuffle_epi8(_mm256_load_si256(reinterpret_cast<const __m256i*>(kF16E2M1)), codes);
    const __m256i lo = _mm256_unpacklo_epi8(_mm256_setzero_si256(), hib);  // elements 0-7 | 16-23
    const __m256i hi = _mm256_unpackhi_epi8(_mm256_setzero_si256(), hib);  // elements 8-15 | 24-31
    v[0] = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(lo)), scale);
    v[1] = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(hi)), scale);
    v[2] = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(lo, 1)), scale);
    v[3] = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(hi, 1)), scale);
}

inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

}  // namespace
}  // namespace sluice::ops::cpu::avx2
