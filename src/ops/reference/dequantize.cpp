// Reference dequantisers: one row of a Weight to f32. The plainest code that matches the format's definition;
// never optimised, because every fast kernel is tested against it.
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "ops/ops.h"

namespace sluice::ops::ref {

void dequantize_row(const Weight& w, int64_t r, float* out) {
    SLUICE_ASSERT(r >= 0 && r < w.rows, "row ", r, " of ", w.rows);
    const int64_t n = w.cols;
    switch (w.format) {
        case WeightFormat::F32:
            std::memcpy(out, w.data + uint64_t(r) * n * 4, size_t(n) * 4);
            return;
        case WeightFormat::BF16: {
            const uint8_t* p = w.data + uint64_t(r) * n * 2;
            for (int64_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, p + 2 * i, 2);
                out[i] = bf16_to_f32(h);
            }
            return;
        }
        case WeightFormat::F16: {
            const uint8_t* p = w.data + uint64_t(r) * n * 2;
            for (int64_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, p + 2 * i, 2);
                out[i] = f16_to_f32(h);
            }
            return;
        }
        case WeightFormat::MXFP4: {
            // compressed-tensors mxfp4-pack-quantized: element 2j = low nibble of byte j, 2j+1 = high nibble;
            // E2M1 magnitude table, bit 3 = sign; one E8M0 scale byte per 32 elements: 2^(byte-127), 0xFF = NaN.
            static const float kE2M1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
            const uint8_t* p = w.data + uint64_t(r) * uint64_t(n / 2);
            const uint8_t* sc = w.scales + uint64_t(r) * uint64_t(n / 32);
            for (int64_t i = 0; i < n; ++i) {
                const uint8_t code = (i & 1) ? uint8_t(p[i / 2] >> 4) : uint8_t(p[i / 2] & 15);
                const uint8_t e = sc[i / 32];
                const float scale = e == 0xFF ? NAN : std::ldexp(1.0f, int(e) - 127);
                out[i] = ((code & 8) ? -kE2M1[code & 7] : kE2M1[code & 7]) * scale;
            }
            return;
        }
        default:
            fail("dequantize_row: format ", weight_format_name(w.format), " is not implemented yet");
    }
}

}  // namespace sluice::ops::ref
