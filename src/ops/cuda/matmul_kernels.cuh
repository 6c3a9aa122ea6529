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
struct MmaArgs {
    const __nv_bfloat16* xs;  // x split into parts [3][n][cols] (split_x), unless mma_splits_itself(n)
    const float* x;           // x [n][cols]: read directly when mma_splits_itself(n)
    int64_t n;
    float* y;                 // [n][rows]
    int splits;               // parts of k (k_splits: the weight's shape alone decides it)
    float* part;              // [splits][n][rows] partial sums when splits > 1, added in split order into y
};
// For so few rows the kernel splits its activations itself (one launch, no split_x).
bool mma_splits_itself(int64_t n);
void mma_matmul(const WDesc& w, const MmaArgs& a, cudaStream_t s);
// F32 / F16 weights, and BF16 / FP8 ones whose width is not a multiple of 32: one warp per output, lanes stride the columns, a fixed shuffle tree adds them.
void ffma_matmul(const WDesc& w, const float* x, int64_t n, float* y, cudaStream_t s);

}  // namespace sluice::cuda::kernels
