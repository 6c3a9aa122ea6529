// A weight matrix as a view over bytes in one of the formats checkpoints ship. Shapes follow PyTorch's
// [out, in] = [rows, cols]; y = W x. Experts and spine tensors alike are Weights once their bytes are resident.
#pragma once

#include <cstdint>
#include <string_view>

namespace sluice {

enum class WeightFormat : uint8_t {
    F32,
    F16,
    BF16,
    FP8_E4M3_B128,  // F8_E4M3 [rows, cols] + f32 weight_scale_inv [ceil(rows/128), ceil(cols/128)] (multiply)
    MXFP4,          // U8 [rows, cols/2], element 2j low nibble / 2j+1 high; E8M0 scales U8 [rows, cols/32]
                    // (gpt-oss *_blocks [rows, cols/32, 16] + *_scales are the same bytes per row)
    INT4_G32,       // compressed-tensors pack-quantized: I32 [rows, cols/8] LSB first, (q+8); BF16 scales [rows, cols/32]
    Q8_0,           // ggml blocks along cols
    Q4_K,
    Q6_K,
    MXFP4_GGML,     // ggml block_mxfp4: {e8m0, qs[16]}, qs[j]&15 = element j, qs[j]>>4 = element j+16
};

std::string_view weight_format_name(WeightFormat f);

struct Weight {
    WeightFormat format = WeightFormat::F32;
    int64_t rows = 0;                 // output features
    int64_t cols = 0;                 // input features
    const uint8_t* data = nullptr;    // [rows, cols] in `format`
    const uint8_t* scales = nullptr;  // format-specific (see WeightFormat); null for plain float formats

    // Bytes of `data` (the matrix payload, scales excluded) and of `scales`.
    uint64_t data_bytes() const;
    uint64_t scale_bytes() const;

    // Throws sluice::Error unless the view is usable by the ops: non-negative shape, data (and scales where the
    // format has them) present, and cols a multiple of the format's block (32, or 256 for Q4_K/Q6_K).
    void check() const;
};

// Columns per quantisation block along a row (1 for float formats, 128 for FP8's 128x128 scale tiles).
int64_t weight_block_cols(WeightFormat f);

}  // namespace sluice
