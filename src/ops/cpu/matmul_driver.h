// The blocking loop shared by every CPU matmul path, instantiated once per ISA translation unit (everything here
// has internal linkage). Kernel K supplies:
//   K::kMr, K::kNr                       register tile: weight rows x input rows
//   K::decode(w, r, c0, k, out)          dequantise columns [c0, c0+k) of row r to f32
//   K::template tile<MR, NR>(wr, x, ldx, k, out)  out[i*MR + j] = dot(wr[j][0:k], x[i*ldx + 0:k])
// Every dot product is accumulated the same way whatever tile it falls in, and chunk partial sums are added
// in column order, so y does not depend on the thread split or on n.
#pragma once

#include <cstdint>

#include "ops/cpu/kernels.h"
#include "ops/weight.h"

namespace sluice::ops::cpu {
namespace {

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

template <class K, int MR>
void run_tile(int ni, const float* const* wr, const float* x, int64_t ldx, int64_t k, float* out) {
    static_assert(K::kNr <= 4);
    switch (ni) {
        case 1: K::template tile<MR, 1>(wr, x, ldx, k, out); break;
        case 2: if constexpr (K::kNr >= 2) K::template tile<MR, 2>(wr, x, ldx, k, out); break;
        case 3: if constexpr (K::kNr >= 3) K::template tile<MR, 3>(wr, x, ldx, k, out); break;
        case 4: if constexpr (K::kNr >= 4) K::template tile<MR, 4>(wr, x, ldx, k, out); break;
        default: break;
    }
}

template <class K>
void run_tile_any(int mr, int ni, const float* const* wr, const float* x, int64_t ldx, int64_t k, float* out) {
    static_assert(K::kMr == 4);
    switch (mr) {
        case 1: run_tile<K, 1>(ni, wr, x, ldx, k, out); break;
        case 2: run_tile<K, 2>(ni, wr, x, ldx, k, out); break;
        case 3: run_tile<K, 3>(ni, wr, x, ldx, k, out); break;
        default: run_tile<K, 4>(ni, wr, x, ldx, k, out); break;
    }
}

// Partial sums of chunk c0 (k columns) for weight rows rb + [0, nr) (that chunk of row j at wc[j]) and input rows
// [i_begin, i_end), added into y in chunk order. Weight-row tiles outside, input rows inside: a tile's kMr weight-row
// chunks (8 KiB at kMr = 4) stay in L1 while the input chunk streams past them from L2 (the other order re-read the
// block's whole chunk, 32 KiB beside the inputs, for every kNr input rows).
template <class K>
void chunk_tiles(const float* const* wc, int64_t nr, const float* x, int64_t i_begin, int64_t i_end, int64_t cols,
                 int64_t rows, int64_t rb, int64_t c0, int64_t k, float* y) {
    float part[4 * 4];
    for (int64_t j0 = 0; j0 < nr; j0 += K::kMr) {
        const int mr = int(imin(K::kMr, nr - j0));
        for (int64_t i0 = i_begin; i0 < i_end; i0 += K::kNr) {
            const int ni = int(imin(K::kNr, i_end - i0));
            run_tile_any<K>(mr, ni, wc + j0, x + i0 * cols + c0, cols, k, part);
            for (int i = 0; i < ni; ++i)
                for (int j = 0; j < mr; ++j) {
                    float& dst = y[(i0 + i) * rows + rb + j0 + j];
                    dst = c0 == 0 ? part[i * mr + j] : dst + part[i * mr + j];
                }
        }
    }
}

// Many input rows (n > kPanelRows): their chunks no longer stay in L2 beside a block of 16 decoded rows, and were
// fetched again from L3 or DRAM for every 16 weight rows (512 rows ran at half the speed of 128). Here up to
// kPanelBlockRows weight rows are decoded a chunk at a time (128 KiB), and input rows go in panels of kPanelRows
// (192 KiB of chunk), so both stay in L2 and a panel's chunk is fetched once per 64 weight rows. Each output's
// arithmetic is that of matmul_rows_blocked (same tiles, same chunk order): same bits.
inline constexpr int64_t kPanelRows = 96;
inline constexpr int64_t kPanelBlockRows = 64;

template <class K>
void matmul_rows_panels(const Weight& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1,
                        float* scratch) {
    const int64_t cols = w.cols, rows = w.rows;
    const int64_t chunk = imin(kChunkCols, cols);  // scratch's row stride
    // matmul_scratch_floats(cols) >= 4 * cols floats: at least 4 rows of a chunk
    const int64_t block_rows = imin(kPanelBlockRows, matmul_scratch_floats(cols) / chunk / 4 * 4);
    const float* wc[kPanelBlockRows];
    for (int64_t rb = r0; rb < r1; rb += block_rows) {
        const int64_t nr = imin(block_rows, r1 - rb);
        for (int64_t c0 = 0; c0 < cols; c0 += kChunkCols) {
            const int64_t k = imin(kChunkCols, cols - c0);
            for (int64_t j = 0; j < nr; ++j) {
                if (w.format == WeightFormat::F32) {
                    wc[j] = reinterpret_cast<const float*>(w.data) + (rb + j) * cols + c0;
                } else {
                    K::decode(w, rb + j, c0, k, scratch + j * chunk);
                    wc[j] = scratch + j * chunk;
                }
            }
            for (int64_t p0 = 0; p0 < n; p0 += kPanelRows)
                chunk_tiles<K>(wc, nr, x, p0, imin(n, p0 + kPanelRows), cols, rows, rb, c0, k, y);
        }
    }
}

template <class K>
void matmul_rows_blocked(const Weight& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1,
                         float* scratch) {
    if (n > kPanelRows) return matmul_rows_panels<K>(w, x, n, y, r0, r1, scratch);
    const int64_t cols = w.cols;
    const int64_t block_rows = matmul_block_rows(cols);
    const float* wr[kRowBlock];
    const float* wc[kRowBlock];
    for (int64_t rb = r0; rb < r1; rb += block_rows) {
        const int64_t nr = imin(block_rows, r1 - rb);
        // Whole rows are decoded first: each weight row is then one sequential read, which the hardware
        // prefetchers follow (chunk-by-chunk decoding across 16 rows left them behind).
        for (int64_t j = 0; j < nr; ++j) {
            if (w.format == WeightFormat::F32) {
                wr[j] = reinterpret_cast<const float*>(w.data) + (rb + j) * cols;
            } else {
                K::decode(w, rb + j, 0, cols, scratch + j * cols);
                wr[j] = scratch + j * cols;
            }
        }
        for (int64_t c0 = 0; c0 < cols; c0 += kChunkCols) {
            for (int64_t j = 0; j < nr; ++j) wc[j] = wr[j] + c0;
            chunk_tiles<K>(wc, nr, x, 0, n, cols, w.rows, rb, c0, imin(kChunkCols, cols - c0), y);
        }
    }
}

}  // namespace
}  // namespace sluice::ops::cpu
