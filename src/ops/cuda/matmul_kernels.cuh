// The matmul kernels (ops/cuda/matmul.cu) as the backend launches them. Device code only; see backend.h for the
// exactness argument.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/weight.h"

namespace sluice::cuda::kernels {

struct WDesc {
    int format;  // WeightFormat
    int64_t rows, cols;
    const uint8_t* data;
    const uint8_t* scales;
};

constexpr int kChunkCols = 128;  // k chunk: each of a quad's 4 threads owns 32 contiguous columns of it
constexpr int kWarpRows = 16;    // weight rows per warp (the mma's M)
constexpr int kBlockWarps = 4;

// x [count] -> hi, mid, lo bf16 with hi + mid + lo == x (exactly, for finite x; a non-finite x goes in hi alone).
void split_x(const float* x, int64_t count, __nv_bfloat16* parts, cudaStream_t s);
// out[split][n][rows] (or y[n][rows] when splits == 1) from the split parts xs[3][n][cols].
void mma_matmul(const WDesc& w, const __nv_bfloat16* xs, int64_t n, float* out, int splits, cudaStream_t s);
// y[i] = part[0][i] + part[1][i] + ... in split order.
void reduce_splits(const float* part, int splits, int64_t count, float* y, cudaStream_t s);
// F32 / F16 weights, and BF16 / FP8 ones whose width is not a multiple of 32: one warp per output, lanes stride the columns, a fixed shuffle tree adds them.
void ffma_matmul(const WDesc& w, const float* x, int64_t n, float* y, cudaStream_t s);

}  // namespace sluice::cuda::kernels
