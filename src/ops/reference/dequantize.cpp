// Reference dequantisers: one row (or column range of a row) of a Weight to f32. The plainest code that matches
// each format's definition (docs: specs-digest §3); never optimised, because every fast kernel is tested against
// it. NaN scales (E8M0 0xFF, NaN f32/bf16 scales) make every value of their block NaN, even for zero codes.
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "ops/ops.h"
#include "ops/reference/dequantize_detail.h"

namespace sluice::ops::ref {

namespace {

uint16_t load_u16(const uint8_t* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}

struct E8m0Table {
    float v[256];
    E8m0Table() {
        for (int i = 0; i < 256; ++i) v[i] = e8m0_to_f32(uint8_t(i));
    }
};

// FP8 E4M3 with 128x128 f32 scale tiles (DeepSeek "weight_scale_inv": multiply).
void fp8_range(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out) {
    const int64_t tiles_per_row = (w.cols + 127) / 128;
    const uint8_t* q = w.data + uint64_t(r) * uint64_t(w.cols);
    const uint8_t* s = w.scales + uint64_t(r / 128) * uint64_t(tiles_per_row) * 4;
    for (int64_t c = c0; c < c0 + k; ++c) {
        float scale;
        std::memcpy(&scale, s + (c / 128) * 4, 4);
        out[c - c0] = fp8_e4m3_to_f32(q[c]) * scale;
    }
}

// compressed-tensors / gpt-oss MXFP4: byte j of a row holds element 2j (low nibble) and 2j+1 (high nibble).
void mxfp4_range(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out) {
    const uint8_t* q = w.data + uint64_t(r) * uint64_t(w.cols / 2);
    const uint8_t* s = w.scales + uint64_t(r) * uint64_t(w.cols / 32);
    for (int64_t c = c0; c < c0 + k; ++c) {
        const uint8_t byte = q[c / 2];
        const uint8_t code = (c % 2 == 0) ? (byte & 0xF) : (byte >> 4);
        out[c - c0] = kE2M1Values[code] * e8m0_value(s[c / 32]);
    }
}

// compressed-tensors pack-quantized INT4: int32 word c/8 holds value c%8 at bits 4(c%8)..+3, stored as q + 8.
// The value is q * scale rounded to bf16 (nearest even), as compressed-tensors' dequantize computes it in the
// scale's dtype (`x_q.to(scale.dtype) * scale`), and as the bf16 GPU kernels that serve these checkpoints do.
void int4_range(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out) {
    const uint8_t* q = w.data + uint64_t(r) * uint64_t(w.cols / 2);
    const uint8_t* s = w.scales + uint64_t(r) * uint64_t(w.cols / 32) * 2;
    for (int64_t c = c0; c < c0 + k; ++c) {
        uint32_t word;
        std::memcpy(&word, q + (c / 8) * 4, 4);  // little-endian int32, as safetensors stores it
        const int v = int((word >> (4 * (c % 8))) & 0xF) - 8;
        out[c - c0] = bf16_to_f32(f32_to_bf16(float(v) * bf16_to_f32(load_u16(s + (c / 32) * 2))));
    }
}

template <int64_t Values, int64_t Bytes>
void ggml_range(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out,
                void (*block_fn)(const uint8_t*, float*)) {
    const uint8_t* row = w.data + uint64_t(r) * uint64_t(w.cols / Values) * Bytes;
    for (int64_t c = c0; c < c0 + k; c += Values) block_fn(row + (c / Values) * Bytes, out + (c - c0));
}

}  // namespace

float e8m0_value(uint8_t v) {
    static const E8m0Table table;
    return table.v[v];
}

void dequantize_range(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out) {
    SLUICE_ASSERT(r >= 0 && r < w.rows, "row ", r, " of ", w.rows);
    SLUICE_ASSERT(c0 >= 0 && k >= 0 && c0 + k <= w.cols, "columns [", c0, ", ", c0 + k, ") of ", w.cols);
    const int64_t block = w.format == WeightFormat::FP8_E4M3_B128 ? 1 : weight_block_cols(w.format);
    SLUICE_ASSERT(c0 % block == 0 && k % block == 0, "range not block aligned for ", weight_format_name(w.format));
    const uint64_t n = uint64_t(w.cols);
    switch (w.format) {
        case WeightFormat::F32:
            std::memcpy(out, w.data + (uint64_t(r) * n + uint64_t(c0)) * 4, size_t(k) * 4);
            return;
        case WeightFormat::BF16:
            for (int64_t c = c0; c < c0 + k; ++c) out[c - c0] = bf16_to_f32(load_u16(w.data + (r * n + c) * 2));
            return;
        case WeightFormat::F16:
            for (int64_t c = c0; c < c0 + k; ++c) out[c - c0] = f16_to_f32(load_u16(w.data + (r * n + c) * 2));
            return;
        case WeightFormat::FP8_E4M3_B128: return fp8_range(w, r, c0, k, out);
        case WeightFormat::MXFP4: return mxfp4_range(w, r, c0, k, out);
        case WeightFormat::INT4_G32: return int4_range(w, r, c0, k, out);
        case WeightFormat::Q8_0: return ggml_range<32, kQ8_0BlockBytes>(w, r, c0, k, out, dequantize_q8_0_block);
        case WeightFormat::Q4_K: return ggml_range<256, kQ4_KBlockBytes>(w, r, c0, k, out, dequantize_q4_k_block);
        case WeightFormat::Q6_K: return ggml_range<256, kQ6_KBlockBytes>(w, r, c0, k, out, dequantize_q6_k_block);
        case WeightFormat::MXFP4_GGML:
            return ggml_range<32, kMxfp4GgmlBlockBytes>(w, r, c0, k, out, dequantize_mxfp4_ggml_block);
    }
    fail("dequantize: unknown weight format ", int(w.format));
}

void dequantize_row(const Weight& w, int64_t r, float* out) {
    w.check();
    SLUICE_CHECK(r >= 0 && r < w.rows, "dequantize_row: row ", r, " outside [0, ", w.rows, ")");
    dequantize_range(w, r, 0, w.cols, out);
}

}  // namespace sluice::ops::ref
