// f32 lanes rounded to bf16 precision (nearest even, NaN kept), as the reference INT4_G32 dequantiser does.
// static inline: each ISA file gets its own copy compiled with its own flags (see kernels.h).
#pragma once

#include <immintrin.h>

namespace sluice::ops::cpu {

#if defined(__AVX512F__)
static inline __m512 round_bf16_ps(__m512 f) {
    const __m512i b = _mm512_castps_si512(f);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_and_si512(_mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7FFF)), lsb),
                                       _mm512_set1_epi32(int(0xFFFF0000u)));
    return _mm512_mask_mov_ps(_mm512_castsi512_ps(r), _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q), f);
}
#endif

#if defined(__AVX2__)
static inline __m256 round_bf16_ps(__m256 f) {
    const __m256i b = _mm256_castps_si256(f);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7FFF)), lsb),
                                       _mm256_set1_epi32(int(0xFFFF0000u)));
    return _mm256_blendv_ps(_mm256_castsi256_ps(r), f, _mm256_cmp_ps(f, f, _CMP_UNORD_Q));
}
#endif

}  // namespace sluice::ops::cpu
