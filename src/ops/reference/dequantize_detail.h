// Pieces of the reference dequantisers shared with the CPU kernels: code tables, block sizes, and block
// decoders for the ggml formats. Out-of-line functions only (ISA-specific files must not share inline code).
#pragma once

#include <cstdint>

#include "ops/weight.h"

namespace sluice::ops::ref {

// FP4 E2M1 code -> value (codes 8..15 are the negatives; 8 is -0).
inline constexpr float kE2M1Values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                          -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

inline constexpr int64_t kQ8_0BlockBytes = 34;        // f16 d, int8 qs[32]
inline constexpr int64_t kQ4_KBlockBytes = 144;       // f16 d, f16 dmin, u8 scales[12], u8 qs[128]
inline constexpr int64_t kQ6_KBlockBytes = 210;       // u8 ql[128], u8 qh[64], i8 scales[16], f16 d
inline constexpr int64_t kMxfp4GgmlBlockBytes = 17;   // u8 e8m0, u8 qs[16]

// 2^(v-127) for v < 255; NaN for 0xFF (the E8M0 NaN encoding). Table lookup, exact.
float e8m0_value(uint8_t v);

// Columns [c0, c0 + k) of row r of w into out[k]. Block formats need c0 and k to be multiples of
// weight_block_cols (FP8 excepted: any range). Asserts on ranges outside the matrix.
void dequantize_range(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out);

void dequantize_q8_0_block(const uint8_t* block, float* out);         // 32 values
void dequantize_q4_k_block(const uint8_t* block, float* out);         // 256 values
void dequantize_q6_k_block(const uint8_t* block, float* out);         // 256 values
void dequantize_mxfp4_ggml_block(const uint8_t* block, float* out);   // 32 values

}  // namespace sluice::ops::ref
