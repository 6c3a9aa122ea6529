// Helpers shared by the AVX2 kernel files (avx2_matmul.cpp, avx2_matvec.cpp), compiled into each with its AVX2
// flags (internal linkage, as matmul_driver.h). hsum is the horizontal add of both kernels' accumulators: the
// one- and two-row kernel gives the blocked path's bits only because it is the same function.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace sluice::ops::cpu::avx2 {
namespace {

alignas(32) constexpr float kE2M1Magnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

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

inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

}  // namespace
}  // namespace sluice::ops::cpu::avx2
