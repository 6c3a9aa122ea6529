// Reference dequantisers: one row of a Weight to f32. The plainest code that matches the format's definition;
// never optimised, because every fast kernel is tested against it.
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
        default:
            fail("dequantize_row: format ", weight_format_name(w.format), " is not implemented yet");
    }
}

}  // namespace sluice::ops::ref
