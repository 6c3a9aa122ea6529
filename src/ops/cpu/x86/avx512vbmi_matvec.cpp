// AVX-512 few-row kernels for MXFP4 and INT4_G32 on CPUs with VBMI (Ice Lake and later, Zen 4 and later): as
// avx512_matvec.cpp's, but 64 columns' codes are spread into lanes by one vpermb (below), where the plain AVX-512
// kernel spends a vpshufb per 32 columns and a vpsrlvd more per 16. Same values, same accumulation
// (avx512_fused.h), so results equal the other AVX-512 kernels' bit for bit. GCC 12 warns about the
// _mm512_undefined_* inside its own intrinsic headers (a known false positive).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#include "ops/cpu/kernels.h"
#include "ops/cpu/x86/avx512_fused.h"

namespace sluice::ops::cpu::avx512 {

namespace {

// The 32-column tail's decode: vpmultishiftqb on a broadcast 8-byte load. Control: in qword j of the output,
// dword 2j takes bits [8j, 8j + 8) of the source qword (the low nibble of byte j: column 2j) and dword 2j + 1 bits
// [8j + 4, 8j + 12) (the high nibble: column 2j + 1).
struct ShiftControl {
    alignas(64) uint8_t bytes[64] = {};
    ShiftControl() {
        for (int j = 0; j < 8; ++j) {
            bytes[8 * j] = uint8_t(8 * j);
            bytes[8 * j + 4] = uint8_t(8 * j + 4);
        }
    }
};
const ShiftControl kControl;

// round_bf16_ps without its NaN guard, for products of two bf16 values (low 16 bits zero): such a product's NaN
// keeps its low 16 bits zero, so the rounding add cannot carry out of the mantissa. Same bits, 5 instructions.
inline __m512 round_bf16_product(__m512 f) {
    const __m512i b = _mm512_castps_si512(f);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7FFF)), lsb),
                                                _mm512_set1_epi32(int(0xFFFF0000u))));
}

// 64 columns (32 code bytes, two blocks) per load: one vpermb puts code bytes j/2, 8 + j/2, 16 + j/2 and 24 + j/2
// into the four bytes of dword j (columns j, 16 + j, 32 + j, 48 + j all sit in nibble j % 2 of those bytes), one
// vpsrlvd by 4 on odd dwords brings each byte's nibble to its low bits, and vpsrld by 8, 16 and 24 hands vpermps
// (which reads only an index's low 4 bits) the other three. Per 16 columns that is 1.25 shuffles and one shift
// where the 16-column form (kept for the 32-column tail) spent a vpmultishiftqb: on a Zen 4 the multishift takes
// the FMA pipes, which the FMAs and the scale multiplies fill (docs/cpu.md).
struct SpreadControl {
    alignas(64) uint8_t bytes[64] = {};
    alignas(64) uint32_t parity[16] = {};
    SpreadControl() {
        for (int j = 0; j < 16; ++j) {
            for (int k = 0; k < 4; ++k) bytes[4 * j + k] = uint8_t(8 * k + j / 2);
            parity[j] = (j % 2) ? 4 : 0;
        }
    }
};
const SpreadControl kSpread;

template <bool kMx>
struct VbmiNibbleDec : NibbleRow<kMx> {
    static constexpr int kVecs = 4;
    __m512i control, spread, parity;
    void init(const Weight& w, int64_t r) {
        this->init_row(w, r);
        control = _mm512_load_si512(kControl.bytes);
        spread = _mm512_load_si512(kSpread.bytes);
        parity = _mm512_load_si512(kSpread.parity);
    }
    template <bool kTableForm>
    __m512 values(int64_t c) const {
        return this->template block_values<kTableForm>(c, [](__m512 f) { return round_bf16_product(f); });
    }
    template <bool kTableForm>
    void load(int64_t c, __m512* v) const {
        const __m512 st0 = values<kTableForm>(c), st1 = values<kTableForm>(c + 32);
        const __m512i codes =
            _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(this->q + c / 2)));
        const __m512i idx = _mm512_srlv_epi32(_mm512_permutexvar_epi8(spread, codes), parity);
        v[0] = _mm512_permutexvar_ps(idx, st0);
        v[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(idx, 8), st0);
        v[2] = _mm512_permutexvar_ps(_mm512_srli_epi32(idx, 16), st1);
        v[3] = _mm512_permutexvar_ps(_mm512_srli_epi32(idx, 24), st1);
    }
    template <bool kTableForm>
    void load_tail(int64_t c, __m512* v) const {
        const __m512 st = values<kTableForm>(c);
        for (int h = 0; h < 2; ++h) {
            long long codes;
            std::memcpy(&codes, this->q + c / 2 + 8 * h, 8);
            v[h] = _mm512_permutexvar_ps(_mm512_multishift_epi64_epi8(control, _mm512_set1_epi64(codes)), st);
        }
    }
};

}  // namespace

bool matmul_rows_fused_vbmi(const Weight& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
    if (n < 1 || n > 4) return false;
    switch (w.format) {
        case WeightFormat::MXFP4: fused_any_n<VbmiNibbleDec<true>>(w, x, n, y, r0, r1); return true;
        case WeightFormat::INT4_G32: fused_any_n<VbmiNibbleDec<false>>(w, x, n, y, r0, r1); return true;
        default: return false;
    }
}

}  // namespace sluice::ops::cpu::avx512
