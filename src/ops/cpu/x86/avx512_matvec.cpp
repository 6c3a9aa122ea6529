// AVX-512 matmul for few input rows (n <= 4): weights are decoded straight into registers and consumed by FMAs,
// 4 weight rows at a time (4 sequential read streams), with no f32 scratch round trip. The arithmetic per output
// is exactly that of the blocked path (same values, same column order, same 512-column chunk sums), so results
// do not depend on n. MXFP4/INT4 scale a 16-entry value table once per block and look codes up with vpermps.
// GCC 12 warns about the _mm512_undefined_* inside its own intrinsic headers (a known false positive).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#include "ops/cpu/kernels.h"
#include "ops/cpu/x86/avx512_fused.h"
#include "ops/cpu/x86/round_bf16.h"
#include "ops/reference/dequantize_detail.h"

namespace sluice::ops::cpu::avx512 {

namespace {


// vpshufb indices putting, in every 128-bit lane, bytes e/2 and 8 + e/2 into bytes 0 and 1 of dword e (columns e
// and 16 + e, both in nibble e % 2); vpsrlvd by 4 on odd dwords then brings each byte's nibble to its low bits,
// vpsrld by 8 the second byte's down. vpermps reads only the low 4 bits of each index. One vpshufb per 32 columns
// where a vpshufb and a vpsrlvd per 16 were spent before.
struct SpreadTables {
    alignas(64) uint8_t bytes[64];
    alignas(64) uint32_t shifts[16];
    SpreadTables() {
        for (int e = 0; e < 16; ++e) {
            bytes[4 * e] = uint8_t(e / 2);
            bytes[4 * e + 1] = uint8_t(8 + e / 2);
            bytes[4 * e + 2] = bytes[4 * e + 3] = 0x80;  // zero
            shifts[e] = (e % 2) ? 4 : 0;
        }
    }
};
const SpreadTables kSpread;

inline float bits_f32(uint32_t b) {
    float f;
    std::memcpy(&f, &b, 4);
    return f;
}
inline float e8m0(uint8_t v) { return bits_f32(v == 0 ? 0x00400000u : v == 0xFF ? 0x7fc00000u : uint32_t(v) << 23); }
inline uint16_t u16_at(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return h;
}


// MXFP4 (kMx) and INT4_G32: byte j holds element 2j (low nibble) and 2j+1 (high nibble).
template <bool kMx>
struct NibbleDec : NibbleRow<kMx> {
    static constexpr int kVecs = 2;
    __m512i spread, sh;
    void init(const Weight& w, int64_t r) {
        this->init_row(w, r);
        spread = _mm512_load_si512(kSpread.bytes);
        sh = _mm512_load_si512(kSpread.shifts);
    }
    template <bool kTableForm>
    void load(int64_t c, __m512* v) const {
        const __m512 st = this->template block_values<kTableForm>(c, [](__m512 f) { return round_bf16_ps(f); });
        const __m512i bytes =
            _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(this->q + c / 2)));
        const __m512i idx = _mm512_srlv_epi32(_mm512_shuffle_epi8(bytes, spread), sh);
        v[0] = _mm512_permutexvar_ps(idx, st);
        v[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(idx, 8), st);
    }
};

struct GgmlMxDec {  // MXFP4_GGML: {e8m0, qs[16]}, qs[j] low nibble = element j, high = element j + 16
    static constexpr int kVecs = 2;
    const uint8_t* row;
    __m512 table;
    void init(const Weight& w, int64_t r) {
        row = w.data + uint64_t(r) * uint64_t(w.cols / 32) * ref::kMxfp4GgmlBlockBytes;
        table = _mm512_loadu_ps(ref::kE2M1Values);
    }
    void load(int64_t c, __m512* v) const {
        const uint8_t* b = row + (c / 32) * ref::kMxfp4GgmlBlockBytes;
        if (c % 128 == 0) _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchBytes), _MM_HINT_T0);
        const __m512i codes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 1)));
        const __m512 st = _mm512_mul_ps(table, _mm512_set1_ps(e8m0(b[0])));
        v[0] = _mm512_permutexvar_ps(codes, st);
        v[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(codes, 4), st);
    }
};

struct Q8Dec {
    static constexpr int kVecs = 2;
    const uint8_t* row;
    void init(const Weight& w, int64_t r) { row = w.data + uint64_t(r) * uint64_t(w.cols / 32) * ref::kQ8_0BlockBytes; }
    void load(int64_t c, __m512* v) const {
        const uint8_t* b = row + (c / 32) * ref::kQ8_0BlockBytes;
        if (c % 64 == 0) _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchBytes), _MM_HINT_T0);
        const __m512 d = _mm512_set1_ps(_cvtsh_ss(u16_at(b)));
        for (int h = 0; h < 2; ++h)
            v[h] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 + 16 * h)))));
    }
};

struct Half16Dec {  // BF16 and F16
    static constexpr int kVecs = 1;
    const uint8_t* p;
    bool bf16;
    void init(const Weight& w, int64_t r) {
        p = w.data + uint64_t(r) * uint64_t(w.cols) * 2;
        bf16 = w.format == WeightFormat::BF16;
    }
    void load(int64_t c, __m512* v) const {
        if (c % 32 == 0) _mm_prefetch(reinterpret_cast<const char*>(p + 2 * c + kPrefetchBytes), _MM_HINT_T0);
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * c));
        v[0] = bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)) : _mm512_cvtph_ps(h);
    }
};

struct Fp8Dec {
    static constexpr int kVecs = 1;
    const uint8_t* q;
    const uint8_t* srow;
    void init(const Weight& w, int64_t r) {
        q = w.data + uint64_t(r) * uint64_t(w.cols);
        srow = w.scales + uint64_t(r / 128) * uint64_t((w.cols + 127) / 128) * 4;
    }
    void load(int64_t c, __m512* v) const {
        if (c % 64 == 0) _mm_prefetch(reinterpret_cast<const char*>(q + c + kPrefetchBytes), _MM_HINT_T0);
        float scale;
        std::memcpy(&scale, srow + (c / 128) * 4, 4);
        const __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + c)));
        const __m512i m7f = _mm512_set1_epi32(0x7F);
        const __m512i mag = _mm512_and_si512(x, m7f);
        __m512 f = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(mag, 20)), _mm512_set1_ps(0x1p120f));
        f = _mm512_mask_mov_ps(f, _mm512_cmpeq_epi32_mask(mag, m7f), _mm512_set1_ps(__builtin_nanf("")));
        f = _mm512_castsi512_ps(_mm512_or_si512(
            _mm512_castps_si512(f), _mm512_slli_epi32(_mm512_and_si512(x, _mm512_set1_epi32(0x80)), 24)));
        v[0] = _mm512_mul_ps(f, _mm512_set1_ps(scale));
    }
};

}  // namespace

bool matmul_rows_fused(const Weight& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
    if (n < 1 || n > 4) return false;
    switch (w.format) {
        case WeightFormat::MXFP4: fused_any_n<NibbleDec<true>>(w, x, n, y, r0, r1); return true;
        case WeightFormat::INT4_G32: fused_any_n<NibbleDec<false>>(w, x, n, y, r0, r1); return true;
        case WeightFormat::MXFP4_GGML: fused_any_n<GgmlMxDec>(w, x, n, y, r0, r1); return true;
        case WeightFormat::Q8_0: fused_any_n<Q8Dec>(w, x, n, y, r0, r1); return true;
        case WeightFormat::BF16:
        case WeightFormat::F16:
            if (w.cols % 16 != 0) return false;
            fused_any_n<Half16Dec>(w, x, n, y, r0, r1);
            return true;
        case WeightFormat::FP8_E4M3_B128:
            if (w.cols % 16 != 0) return false;
            fused_any_n<Fp8Dec>(w, x, n, y, r0, r1);
            return true;
        default: return false;
    }
}

}  // namespace sluice::ops::cpu::avx512
