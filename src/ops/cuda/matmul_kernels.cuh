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

// The nibble formats (MXFP4, INT4) feed column j of each group of 8 with column j + 4 to an mma register (their
// decode places two codes 16 bits apart in one step), so their split activations are laid out in that order.
__host__ __device__ constexpr bool nibble_pairs(int format) {
    return format == int(WeightFormat::MXFP4) || format == int(WeightFormat::INT4_G32);
}

// x [count] -> hi, mid, lo bf16 with hi + mid + lo == x (exactly, for finite x; a non-finite x goes in hi alone),
// the three parts `plane` elements apart (count <= plane), in the order nibble_pairs formats read (nibble) or in
// natural order.
void split_x(const float* x, int64_t count, __nv_bfloat16* parts, int64_t plane, bool nibble, cudaStream_t s);
struct MmaArgs {
    const __nv_bfloat16* xs;  // x split into parts [3][n][cols] (split_x, nibble_pairs(format) order), unless
                              // mma_splits_itself(n)
    const float* x;           // x [n][cols]: read directly when mma_splits_itself(n)
    int64_t n;
    float* y;                 // [n][rows]
    int splits;               // parts of k (k_splits: the weight's shape alone decides it)
    float* part;              // [splits][n][rows] partial sums when splits > 1, added in split order into y
};
// For so few rows the kernel splits its activations itself (one launch, no split_x).
bool mma_splits_itself(int64_t n);
// The tile the kernels use for n activation rows of a weight of this format: its variant, and the weight rows and
// activation rows one block covers (the grid is rows / block_rows x n / block_n x splits). Speed only: no row's bits
// depend on it.
struct Tile {
    int kind;
    int64_t block_rows, block_n;
    bool self_split;  // reads f32 activations and splits them itself (else the split_x parts)
};
Tile tile_for(int format, int64_t n);

// One weight's product in a grouped launch (an expert group: ops/cuda/expert_group.cu).
struct GroupJob {
    WDesc w;
    const float* x;          // [n][cols] when the tile splits its own activations
    const __nv_bfloat16* xs; // else their parts: part p of row i at xs + p * plane + i * cols
    float* y;                // [n][rows], when splits == 1
    float* part;             // else split s's partial sums at part + s * part_stride, laid out as y
    int64_t n;
    int64_t first_block;     // its first block in the launch's flat grid (ascending over the jobs)
    int64_t row_blocks;      // its blocks are row_blocks x (n / block_n), row block fastest
};
// A launch of `count` jobs of one format, shape and tile kind; jobs in device memory.
struct GroupLaunch {
    const GroupJob* jobs;
    int count;
    int64_t blocks;  // the flat grid: the sum of the jobs' blocks
    int64_t plane;
    bool xs_nibble;  // the parts laid out for nibble_pairs (else natural order: a nibble format's kernel pairs them)
    int64_t part_stride;
    int splits;
    int64_t chunks_per_split;
    // -1: every split in one launch (grid z), each to its jobs' part, added up by reduce_splits afterwards; s >= 0:
    // split s alone, adding to y (launched for s = 0, 1, ... in order: the same bits, no partial-sum buffer)
    int split_index = -1;
};
// Each job gets the bits mma_matmul gives its weight and rows alone (the same tile code, the same k split). Every
// kind reads the split_x parts here (kind 0 too, unlike mma_matmul's): the group splits its rows once.
void grouped_mma(int format, int kind, const GroupLaunch& g, cudaStream_t s);
// y[i] = part[i] + part[split_stride + i] + ... (splits terms, in order) for i < count.
void reduce_splits(const float* part, int splits, int64_t split_stride, float* y, int64_t count, cudaStream_t s);
void mma_matmul(const WDesc& w, const MmaArgs& a, cudaStream_t s);
// F32 / F16 weights, and BF16 / FP8 ones whose width is not a multiple of 32: one warp per output, lanes stride the columns, a fixed shuffle tree adds them.
void ffma_matmul(const WDesc& w, const float* x, int64_t n, float* y, cudaStream_t s);

}  // namespace sluice::cuda::kernels
