// The per-ISA kernel entry points behind ops::matmul / ops::dequantize_row (chosen in dispatch.cpp). Each path
// lives in its own translation unit compiled with its own ISA flags; they share no inline code (an inline
// function compiled with -mavx512f could be picked by the linker for every caller), so scratch memory comes from
// the caller instead of a std::vector inside the kernel file.
#pragma once

#include <cstdint>

#include "ops/weight.h"

namespace sluice::ops::cpu {

// Kernels walk the weights in blocks of kRowBlock rows x kChunkCols columns: the block is dequantised once into
// f32 scratch and multiplied with every input row, so the x chunk [n, kChunkCols] stays in L2.
inline constexpr int64_t kChunkCols = 512;  // multiple of every block size (32, 128, 256)
inline constexpr int64_t kRowBlock = 16;
inline constexpr int64_t kScratchFloats = kRowBlock * kChunkCols;

// y[:, r0:r1] of y[n, w.rows] = x[n, w.cols] . W^T. scratch: kScratchFloats floats.
using MatmulRowsFn = void (*)(const Weight& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1,
                              float* scratch);
// Columns [c0, c0 + k) of row r (block aligned like ref::dequantize_range) into out.
using DequantRangeFn = void (*)(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out);

namespace portable {
void matmul_rows(const Weight& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1, float* scratch);
void dequantize_range(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out);
}  // namespace portable

namespace avx2 {  // needs avx2 + fma + f16c
void matmul_rows(const Weight& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1, float* scratch);
void dequantize_range(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out);
}  // namespace avx2

namespace avx512 {  // needs avx512f/bw/vl/dq + fma + f16c
void matmul_rows(const Weight& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1, float* scratch);
void dequantize_range(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out);
}  // namespace avx512

}  // namespace sluice::ops::cpu
