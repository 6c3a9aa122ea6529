// AVX2 matmul for one or two input rows: weights are decoded straight into registers and consumed by FMAs, 4
// weight rows at a time (4 sequential read streams), with no f32 scratch round trip. The arithmetic per output
// is exactly that of the blocked path in avx2_matmul.cpp (same values, same 8-lane accumulators fed in column
// order, same 512-column chunk sums and horizontal adds), so results do not depend on n. Nibble formats look
// their codes up as the two bytes of a bf16 with vpshufb (INT4: in a table of the block's 16 scaled values).
#include <immintrin.h>

#include <cstring>

#include "ops/cpu/chunked_decoder.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/x86/avx2_common.h"
#include "ops/reference/dequantize_detail.h"

namespace sluice::ops::cpu::avx2 {

namespace {

// Every decoder prefetches its row this far ahead, one line per 64 bytes consumed (as the AVX-512 matvec), except
// MXFP4's and INT4's (below).
constexpr int64_t kPrefetchBytes = 512;
// MXFP4 and INT4 rows run in groups of up to 8 (fused_range), each group one contiguous run of codes and one of
// scales; their decoders prefetch, into L2, the row this many rows on, at the column they are at (x86/avx512_fused.h
// says why: the next group's first scale loads went to DRAM while the loop waited on them).
constexpr uint64_t kAheadRows = 8;

// MXFP4 (kMx) and INT4_G32, 32 columns (16 bytes, one scale block) per load. begin_chunk decodes a 512-column
// chunk's scales before the column loop and says whether INT4's table form holds for the whole chunk; the loop is
// compiled once per form (load<kTable>), with no per-block test or scale decoding inside it.
template <bool kMx>
struct NibbleDec {
    static constexpr int kVecs = 4;
    const uint8_t* q;
    const uint8_t* s;
    const uint8_t* q_ahead;  // the same row kAheadRows on, for prefetching only
    const uint8_t* s_ahead;
    int64_t cols;
    // the 16 blocks of the current chunk: MXFP4's E8M0 scales as f32 (decode_scales); INT4_G32's scales' signs and
    // powers of two as f32, with their mantissas below (decode_int4_scales)
    alignas(32) float scale[16];
    alignas(32) int32_t mantissa[16];
    void init(const Weight& w, int64_t r) {
        q = w.data + uint64_t(r) * uint64_t(w.cols / 2);
        s = w.scales + uint64_t(r) * uint64_t(w.cols / 32) * (kMx ? 1 : 2);
        cols = w.cols;
        q_ahead = prefetch_address(q, kAheadRows * uint64_t(w.cols / 2));
        s_ahead = prefetch_address(s, kAheadRows * uint64_t(w.cols / 32) * (kMx ? 1 : 2));
    }
    // 2^(e - 127) for the eight blocks of columns [c, c + 256) at once, without branches: e = 0 is 2^-127
    // (0x00400000), e = 255 NaN.
    void decode_scales(int64_t c, float* out) const {
        if (c + 256 > cols) {
            for (int64_t b = c / 32; b < cols / 32; ++b) out[b % 8] = e8m0(s[b]);
            return;
        }
        const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + c / 32)));
        const __m256i special = _mm256_or_si256(_mm256_cmpeq_epi32(e, _mm256_setzero_si256()),
                                                _mm256_cmpeq_epi32(e, _mm256_set1_epi32(0xFF)));
        const __m256i bits =
            _mm256_or_si256(_mm256_slli_epi32(e, 23), _mm256_and_si256(special, _mm256_set1_epi32(0x00400000)));
        _mm256_store_ps(out, _mm256_castsi256_ps(bits));
    }
    // The same eight blocks' INT4 scales; true when all are in the table range of int4_mantissa.h.
    bool decode_int4_scales(int64_t c, float* out, int32_t* mant) const {
        if (c + 256 > cols) {
            bool table_form = true;
            for (int64_t b = c / 32; b < cols / 32; ++b) {
                const uint16_t bits = load_u16(s + 2 * b);
                table_form = table_form && int4_scale_in_table_range(bits);
                mant[b % 8] = int32_t(bits & 0x7Fu);
                out[b % 8] = bits_to_f32(int4_scale_power_bits(bits));
            }
            return table_form;
        }
        const __m256i bits = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + c / 16)));
        const __m256i e = _mm256_and_si256(_mm256_srli_epi32(bits, 7), _mm256_set1_epi32(0xFF));
        const __m256i ok = _mm256_and_si256(_mm256_cmpgt_epi32(e, _mm256_setzero_si256()),
                                            _mm256_cmpgt_epi32(_mm256_set1_epi32(251), e));
        _mm256_store_si256(reinterpret_cast<__m256i*>(mant), _mm256_and_si256(bits, _mm256_set1_epi32(0x7F)));
        _mm256_store_ps(out, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0xFF80)), 16)));
        return _mm256_movemask_ps(_mm256_castsi256_ps(ok)) == 0xFF;
    }
    bool begin_chunk(int64_t c0) {
        _mm_prefetch(reinterpret_cast<const char*>(s_ahead + (c0 / 32) * (kMx ? 1 : 2)), _MM_HINT_T1);
        bool table_form = true;
        for (int64_t h = 0; h < kChunkCols / 256 && c0 + 256 * h < cols; ++h) {
            if constexpr (kMx)
                decode_scales(c0 + 256 * h, scale + 8 * h);
            else
                table_form = decode_int4_scales(c0 + 256 * h, scale + 8 * h, mantissa + 8 * h) && table_form;
        }
        return table_form;
    }
    // MXFP4: +-m through a bf16 lookup (e2m1_vectors) times the scale, as the blocked path computes it. INT4_G32:
    // the 16 values bf16((q - 8) * scale) looked up the same way, from the table of the scale's mantissa times its
    // power of two (int4_mantissa.h) when the chunk's scales allow, else built per block and rounded.
    template <bool kTable>
    void load(int64_t c, __m256* v) const {
        if (c % 128 == 0) _mm_prefetch(reinterpret_cast<const char*>(q_ahead + c / 2), _MM_HINT_T1);
        const int64_t b = (c / 32) % 16;
        if constexpr (kMx)
            e2m1_vectors(mx_codes(q + c / 2), _mm256_broadcast_ss(&scale[b]), v);
        else if constexpr (kTable)
            int4_table_vectors(q + c / 2, unsigned(mantissa[b]), _mm256_broadcast_ss(&scale[b]), v);
        else
            int4_vectors(q + c / 2, load_u16(s + (c / 32) * 2), v);
    }
};

struct GgmlMxDec {  // MXFP4_GGML: {e8m0, qs[16]}, qs[j] low nibble = element j, high = element j + 16
    static constexpr int kVecs = 4;
    const uint8_t* row;
    void init(const Weight& w, int64_t r) {
        row = w.data + uint64_t(r) * uint64_t(w.cols / 32) * ref::kMxfp4GgmlBlockBytes;
    }
    void load(int64_t c, __m256* v) const {  // values as NibbleDec<true>'s
        const uint8_t* b = row + (c / 32) * ref::kMxfp4GgmlBlockBytes;
        if (c % 96 == 0) _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchBytes), _MM_HINT_T0);
        e2m1_vectors(mx_codes_ggml(b + 1), _mm256_set1_ps(e8m0(b[0])), v);
    }
};

struct Q8Dec {  // Q8_0: {f16 d, int8 qs[32]}, d * q as the blocked path computes it
    static constexpr int kVecs = 4;
    const uint8_t* row;
    void init(const Weight& w, int64_t r) { row = w.data + uint64_t(r) * uint64_t(w.cols / 32) * ref::kQ8_0BlockBytes; }
    void load(int64_t c, __m256* v) const {
        const uint8_t* b = row + (c / 32) * ref::kQ8_0BlockBytes;
        if (c % 64 == 0) _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchBytes), _MM_HINT_T0);
        const __m256 d = _mm256_set1_ps(_cvtsh_ss(load_u16(b)));
        for (int q = 0; q < 4; ++q)
            v[q] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + 8 * q)))));
    }
};

struct Fp8Dec {  // FP8 E4M3 with a 128 x 128 block scale, 8 columns per load, as the blocked path decodes it
    static constexpr int kVecs = 1;
    const uint8_t* q;
    const uint8_t* srow;
    void init(const Weight& w, int64_t r) {
        q = w.data + uint64_t(r) * uint64_t(w.cols);
        srow = w.scales + uint64_t(r / 128) * uint64_t((w.cols + 127) / 128) * 4;
    }
    void load(int64_t c, __m256* v) const {
        if (c % 64 == 0) _mm_prefetch(reinterpret_cast<const char*>(q + c + kPrefetchBytes), _MM_HINT_T0);
        float scale;
        std::memcpy(&scale, srow + (c / 128) * 4, 4);
        const __m256i x = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + c)));
        const __m256i m7f = _mm256_set1_epi32(0x7F);
        const __m256i mag = _mm256_and_si256(x, m7f);
        __m256 f = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(mag, 20)), _mm256_set1_ps(0x1p120f));
        f = _mm256_blendv_ps(f, _mm256_set1_ps(__builtin_nanf("")), _mm256_castsi256_ps(_mm256_cmpeq_epi32(mag, m7f)));
        f = _mm256_or_ps(f, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x80)), 24)));
        v[0] = _mm256_mul_ps(f, _mm256_set1_ps(scale));
    }
};

struct Half16Dec {  // BF16 and F16, 8 columns per load
    static constexpr int kVecs = 1;
    const uint8_t* p;
    bool bf16;
    void init(const Weight& w, int64_t r) {
        p = w.data + uint64_t(r) * uint64_t(w.cols) * 2;
        bf16 = w.format == WeightFormat::BF16;
    }
    void load(int64_t c, __m256* v) const {
        if (c % 32 == 0) _mm_prefetch(reinterpret_cast<const char*>(p + 2 * c + kPrefetchBytes), _MM_HINT_T0);
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * c));
        v[0] = bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)) : _mm256_cvtph_ps(h);
    }
};

template <bool kFast, class D, int MR, int NR>
[[gnu::always_inline]] inline void fused_columns(D* dec, const float* x, int64_t cols, int64_t c0, int64_t end,
                                                 __m256 (&acc)[MR][NR]) {
    constexpr int64_t kStep = 8 * D::kVecs;
    for (int64_t c = c0; c < end; c += kStep) {
        // GCC leaves this loop rolled (its body is large), and acc[j] with a run-time j lives on the stack,
        // a store-to-load forward in every FMA chain: MXFP4 one row ran 20% slower.
#pragma GCC unroll 8
        for (int j = 0; j < MR; ++j) {
            __m256 wv[D::kVecs];
            load_form<kFast>(dec[j], c, wv);
            for (int v = 0; v < D::kVecs; ++v)
                for (int i = 0; i < NR; ++i)
                    acc[j][i] = _mm256_fmadd_ps(wv[v], _mm256_loadu_ps(x + i * cols + c + 8 * v), acc[j][i]);
        }
    }
}

template <class D, int MR, int NR>
void fused_rows(const Weight& w, int64_t r, const float* x, float* y) {
    const int64_t cols = w.cols;
    D dec[MR];
    for (int j = 0; j < MR; ++j) dec[j].init(w, r + j);
    for (int64_t c0 = 0; c0 < cols; c0 += kChunkCols) {
        const int64_t end = c0 + kChunkCols < cols ? c0 + kChunkCols : cols;
        __m256 acc[MR][NR];
        for (int j = 0; j < MR; ++j)
            for (int i = 0; i < NR; ++i) acc[j][i] = _mm256_setzero_ps();
        if (begin_chunks<__m256>(dec, MR, c0))
            fused_columns<true>(dec, x, cols, c0, end, acc);
        else
            fused_columns<false>(dec, x, cols, c0, end, acc);
        for (int i = 0; i < NR; ++i)
            for (int j = 0; j < MR; ++j) {
                const float part = hsum(acc[j][i]);
                float& dst = y[i * w.rows + r + j];
                dst = c0 == 0 ? part : dst + part;
            }
    }
}

template <class D, int NR>
void fused_range(const Weight& w, const float* x, float* y, int64_t r0, int64_t r1) {
    int64_t r = r0;
    // One input row, 32-column decoders: a row's FMA chain is serial (the bit-identity order), so 8 rows give the
    // FMA units 8 independent chains where 4 left their latency exposed. (Two input rows already have 8.)
    if constexpr (NR == 1 && D::kVecs == 4)
        for (; r + 8 <= r1; r += 8) fused_rows<D, 8, NR>(w, r, x, y);
    for (; r + 4 <= r1; r += 4) fused_rows<D, 4, NR>(w, r, x, y);
    switch (r1 - r) {
        case 3:
            fused_rows<D, 3, NR>(w, r, x, y);
            break;
        case 2:
            fused_rows<D, 2, NR>(w, r, x, y);
            break;
        case 1:
            fused_rows<D, 1, NR>(w, r, x, y);
            break;
        default:
            break;
    }
}

template <class D>
void fused_any_n(const Weight& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
    if (n == 1) return fused_range<D, 1>(w, x, y, r0, r1);
    return fused_range<D, 2>(w, x, y, r0, r1);
}

}  // namespace

bool matmul_rows_fused(const Weight& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
    if (n < 1 || n > 2) return false;
    switch (w.format) {
        case WeightFormat::MXFP4:
            fused_any_n<NibbleDec<true>>(w, x, n, y, r0, r1);
            return true;
        case WeightFormat::INT4_G32:
            fused_any_n<NibbleDec<false>>(w, x, n, y, r0, r1);
            return true;
        case WeightFormat::MXFP4_GGML:
            fused_any_n<GgmlMxDec>(w, x, n, y, r0, r1);
            return true;
        case WeightFormat::Q8_0:
            fused_any_n<Q8Dec>(w, x, n, y, r0, r1);
            return true;
        case WeightFormat::BF16:
        case WeightFormat::F16:
            if (w.cols % 8 != 0) return false;
            fused_any_n<Half16Dec>(w, x, n, y, r0, r1);
            return true;
        case WeightFormat::FP8_E4M3_B128:
            if (w.cols % 8 != 0) return false;
            fused_any_n<Fp8Dec>(w, x, n, y, r0, r1);
            return true;
        default:
            return false;
    }
}

}  // namespace sluice::ops::cpu::avx2
