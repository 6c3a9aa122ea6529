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

template <class K>
void matmul_rows_blocked(const Weight& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1,
                         float* scratch) {
    const int64_t cols = w.cols, rows = w.rows;
    const int64_t block_rows = matmul_block_rows(cols);
    const float* wr[kRowBlock];
    float part[4 * 4];
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
            const int64_t k = imin(kChunkCols, cols - c0);
            // Weight rows outside, input rows inside: a tile's kMr weight-row chunks (8 KiB at kMr = 4) stay in L1
            // while the input chunk streams past them from L2; the other order re-read the whole block's chunk
            // (32 KiB, beside the inputs) for every kNr input rows. Same products, same order: same bits.
            for (int64_t j0 = 0; j0 < nr; j0 += K::kMr) {
                const int mr = int(imin(K::kMr, nr - j0));
                const float* wc[4];
                for (int j = 0; j < mr; ++j) wc[j] = wr[j0 + j] + c0;
                for (int64_t i0 = 0; i0 < n; i0 += K::kNr) {
                    const int ni = int(imin(K::kNr, n - i0));
                    run_tile_any<K>(mr, ni, wc, x + i0 * cols + c0, cols, k, part);
                    for (int i = 0; i < ni; ++i)
                        for (int j = 0; j < mr; ++j) {
                            float& dst = y[(i0 + i) * rows + rb + j0 + j];
                            dst = c0 == 0 ? part[i * mr + j] : dst + part[i * mr + j];
                        }
                }
            }
        }
    }
}

}  // namespace
}  // namespace sluice::ops::cpu
