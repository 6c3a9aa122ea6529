// The loop shared by the AVX-512 few-row kernels (avx512_matvec.cpp, avx512vbmi_matvec.cpp), instantiated once
// per translation unit with that file's ISA flags (internal linkage, as matmul_driver.h). A decoder D supplies
// kVecs (16-lane vectors per load), init(w, r) and load(c, v): columns [c, c + 16 kVecs) of its row as f32.
// Every output is accumulated exactly as the blocked path accumulates it (one 16-lane accumulator per output, fed
// in column order, summed per 512-column chunk), so results do not depend on n or on which kernel ran.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "ops/cpu/chunked_decoder.h"
#include "ops/cpu/int4_mantissa.h"
#include "ops/cpu/kernels.h"
#include "ops/reference/dequantize_detail.h"
#include "ops/weight.h"

namespace sluice::ops::cpu::avx512 {
namespace {

// The f32 scales of the (up to) 16 blocks of the 512-column chunk starting at column c: E8M0 (MXFP4; 0 -> 2^-127,
// 0xFF -> NaN) or bf16 (INT4_G32). s: the row's scales, n_blocks per row.
inline void chunk_scales(const uint8_t* s, int64_t n_blocks, int64_t c, bool mx, float* out) {
    const int64_t b0 = c / 32, count = n_blocks - b0 < 16 ? n_blocks - b0 : 16;
    const __mmask16 m = __mmask16((1u << count) - 1u);
    __m512i bits;
    if (mx) {
        const __m512i e = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, s + b0));
        bits = _mm512_slli_epi32(e, 23);
        bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()),
                                     _mm512_set1_epi32(0x00400000));
        bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(e, _mm512_set1_epi32(0xFF)),
                                     _mm512_set1_epi32(0x7fc00000));
    } else {
        bits = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, s + 2 * b0)), 16);
    }
    _mm512_storeu_si512(out, bits);
}

// INT4_G32 in table form (ops/cpu/int4_mantissa.h): from the chunk's scales as chunk_scales wrote them (bf16 bits
// << 16), each block's mantissa (its row of kInt4Mantissa.values) and its sign and power of two; false when a block
// of the chunk has a scale outside the table range, whose chunk then takes the multiply-and-round.
inline bool chunk_int4_table_form(const float* scales, int64_t n_blocks, int64_t c, int32_t* mantissa,
                                  int32_t* addend) {
    const int64_t b0 = c / 32, count = n_blocks - b0 < 16 ? n_blocks - b0 : 16;
    const __mmask16 valid = __mmask16((1u << count) - 1u);
    const __m512i bits = _mm512_loadu_si512(scales);
    const __m512i e = _mm512_and_si512(_mm512_srli_epi32(bits, 23), _mm512_set1_epi32(0xFF));
    const __mmask16 ok = _mm512_cmplt_epu32_mask(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), _mm512_set1_epi32(250));
    _mm512_storeu_si512(mantissa, _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x7F)));
    _mm512_storeu_si512(addend, _mm512_sub_epi32(_mm512_and_si512(bits, _mm512_set1_epi32(int(0xFF800000u))),
                                                 _mm512_set1_epi32(127 << 23)));
    return (ok & valid) == valid;
}

constexpr float kInt4Table[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};
// Every decoder prefetches its row this far ahead, one line per 64 bytes consumed: with 4 rows per thread the
// hardware prefetchers alone left the decode waiting on memory (INT4 one-row +20%, FP8 +7-20% on a 2-core VM;
// 512 was the best of 0, 512, 1024 and 2048). The MXFP4 and INT4 decoders prefetch otherwise (NibbleRow).
constexpr int64_t kPrefetchBytes = 512;
// A thread runs a weight's rows kGroupRows at a time (fused_range), one accumulator chain per row.
constexpr uint64_t kGroupRows = 4;

// The part of an MXFP4 (kMx) or INT4_G32 row decoder that does not depend on how codes are spread into lanes: the
// row's codes and scales, the current chunk's scales (begin_chunk: INT4's table form holds when every block's scale
// allows it), and the 16 values of a block's codes. Round: the rounding of q * scale to bf16 for INT4 outside the
// table form (the decoders use different forms of the same rounding).
// Prefetching: the kGroupRows rows a thread runs at once are one contiguous run of codes and one of scales, so each
// decoder prefetches, into L2, the row kGroupRows rows on (the next group's) at the column it is at: a line of codes
// every 128 columns, and that chunk's scales as a chunk begins. Each row used to prefetch its own codes 512 bytes
// ahead and the scales not at all, and every new group's first scale loads (which the chunk's loop waits for) went
// to DRAM: on a 2-core Zen 5 (AVX-512, no AMX) one-row MXFP4 read at a median 43% of the read probe, 84% now
// (docs/cpu.md).
template <bool kMx>
struct NibbleRow {
    const uint8_t* q;
    const uint8_t* s;
    const uint8_t* q_ahead;  // the same row of the next group, for prefetching only
    const uint8_t* s_ahead;
    int64_t n_blocks;
    __m512 table;
    alignas(64) float scales[16];      // the 16 block scales of the current 512-column chunk, as f32
    alignas(64) int32_t mantissa[16];  // INT4_G32 in table form (int4_mantissa.h): each block's table row
    alignas(64) int32_t addend[16];    // the scale's sign and power of two, as an addend to a value's bits
    void init_row(const Weight& w, int64_t r) {
        n_blocks = w.cols / 32;
        q = w.data + uint64_t(r) * uint64_t(w.cols / 2);
        s = w.scales + uint64_t(r) * uint64_t(n_blocks) * (kMx ? 1 : 2);
        q_ahead = prefetch_address(q, kGroupRows * uint64_t(w.cols / 2));
        s_ahead = prefetch_address(s, kGroupRows * uint64_t(n_blocks) * (kMx ? 1 : 2));
        table = _mm512_loadu_ps(kMx ? ref::kE2M1Values : kInt4Table);
    }
    bool begin_chunk(int64_t c0) {
        _mm_prefetch(reinterpret_cast<const char*>(s_ahead + (c0 / 32) * (kMx ? 1 : 2)), _MM_HINT_T1);
        chunk_scales(s, n_blocks, c0, kMx, scales);
        if constexpr (kMx)
            return true;
        else
            return chunk_int4_table_form(scales, n_blocks, c0, mantissa, addend);
    }
    // Prefetches the next group's codes at column c and gives the values of the codes of c's block.
    // INT4 in table form adds the scale's sign and power of two to its mantissa table's bits: a vpaddd, which any
    // vector pipe takes, where a vmulps takes an FMA pipe (on a Zen 4 one-row INT4 ran 10-15% faster). Its zero
    // code comes out +0 (zero-masking; a merge would need a copy of the table first) where the multiply gives -0
    // under a negative scale: a zero weight's sign never reaches an output (the accumulators start at +0, and +0
    // plus -0 is +0). MXFP4 keeps the multiply (with the scale broadcast from memory, one instruction): the same
    // exponent add was 4% slower there on the Zen 4.
    template <bool kTableForm, class Round>
    __m512 block_values(int64_t c, Round round) const {
        if (c % 128 == 0) _mm_prefetch(reinterpret_cast<const char*>(q_ahead + c / 2), _MM_HINT_T1);
        const int64_t b = (c / 32) % 16;
        if constexpr (kTableForm && !kMx) {
            constexpr __mmask16 kNonzero = 0xFEFF;  // all but code 8, the zero
            const __m512i v = _mm512_castps_si512(_mm512_load_ps(kInt4Mantissa.values[mantissa[b]]));
            return _mm512_castsi512_ps(_mm512_maskz_add_epi32(kNonzero, v, _mm512_set1_epi32(addend[b])));
        } else if constexpr (kMx) {
            return _mm512_mul_ps(table, _mm512_set1_ps(scales[b]));
        } else {  // q * scale rounded to bf16
            return round(_mm512_mul_ps(table, _mm512_set1_ps(scales[b])));
        }
    }
};

// Decoders whose load covers more columns than a block format's smallest row (32) also give load_tail(c, v): the
// last 32 columns of a chunk whose width is an odd multiple of 32, as two vectors.
template <class D>
concept HasTail = requires(const D& d, int64_t c, __m512* v) { d.template load_tail<true>(c, v); };

template <bool kFast, class D, int MR, int NR>
[[gnu::always_inline]] inline void fused_columns(D* dec, const float* x, int64_t cols, int64_t c0, int64_t end,
                                                 __m512 (&acc)[MR][NR]) {
    static_assert(D::kVecs <= 2 || HasTail<D>, "a load wider than 32 columns needs load_tail for the odd 32");
    int64_t c = c0;
    for (; c + 16 * D::kVecs <= end; c += 16 * D::kVecs) {
        __m512 xv[NR][D::kVecs];
        for (int i = 0; i < NR; ++i)
            for (int v = 0; v < D::kVecs; ++v) xv[i][v] = _mm512_loadu_ps(x + i * cols + c + 16 * v);
        for (int j = 0; j < MR; ++j) {
            __m512 wv[D::kVecs];
            load_form<kFast>(dec[j], c, wv);
            for (int v = 0; v < D::kVecs; ++v)
                for (int i = 0; i < NR; ++i) acc[j][i] = _mm512_fmadd_ps(wv[v], xv[i][v], acc[j][i]);
        }
    }
    if constexpr (HasTail<D>) {
        if (c < end) {
            __m512 xv[NR][2];
            for (int i = 0; i < NR; ++i)
                for (int v = 0; v < 2; ++v) xv[i][v] = _mm512_loadu_ps(x + i * cols + c + 16 * v);
            for (int j = 0; j < MR; ++j) {
                __m512 wv[2];
                dec[j].template load_tail<kFast>(c, wv);
                for (int v = 0; v < 2; ++v)
                    for (int i = 0; i < NR; ++i) acc[j][i] = _mm512_fmadd_ps(wv[v], xv[i][v], acc[j][i]);
            }
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
        __m512 acc[MR][NR];
        for (int j = 0; j < MR; ++j)
            for (int i = 0; i < NR; ++i) acc[j][i] = _mm512_setzero_ps();
        if (begin_chunks<__m512>(dec, MR, c0))
            fused_columns<true>(dec, x, cols, c0, end, acc);
        else
            fused_columns<false>(dec, x, cols, c0, end, acc);
        for (int i = 0; i < NR; ++i)
            for (int j = 0; j < MR; ++j) {
                const float part = _mm512_reduce_add_ps(acc[j][i]);
                float& dst = y[i * w.rows + r + j];
                dst = c0 == 0 ? part : dst + part;
            }
    }
}

template <class D, int NR>
void fused_range(const Weight& w, const float* x, float* y, int64_t r0, int64_t r1) {
    int64_t r = r0;
    for (; r + int64_t(kGroupRows) <= r1; r += int64_t(kGroupRows)) fused_rows<D, int(kGroupRows), NR>(w, r, x, y);
    switch (r1 - r) {
        case 3: fused_rows<D, 3, NR>(w, r, x, y); break;
        case 2: fused_rows<D, 2, NR>(w, r, x, y); break;
        case 1: fused_rows<D, 1, NR>(w, r, x, y); break;
        default: break;
    }
}

template <class D>
void fused_any_n(const Weight& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
    switch (n) {
        case 1: return fused_range<D, 1>(w, x, y, r0, r1);
        case 2: return fused_range<D, 2>(w, x, y, r0, r1);
        case 3: return fused_range<D, 3>(w, x, y, r0, r1);
        default: return fused_range<D, 4>(w, x, y, r0, r1);
    }
}

}  // namespace
}  // namespace sluice::ops::cpu::avx512
