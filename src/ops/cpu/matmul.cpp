// CPU matmul: each weight row is dequantised once and multiplied with every input row, so a batch of n rows
// reads the weights once. Threads split the output rows; each output element is computed by one thread in a
// fixed order, so results are identical for any thread count.
#include <vector>

#include "ops/cpu/simd.h"
#include "ops/ops.h"

namespace sluice::ops {

void dequantize_row(const Weight& w, int64_t r, float* out) { ref::dequantize_row(w, r, out); }

void matmul(const Weight& w, const float* x, int64_t n, float* y, ThreadPool& pool) {
    const int64_t cols = w.cols;
    pool.parallel_for(
        w.rows,
        [&](int64_t r0, int64_t r1) {
            std::vector<float> row(static_cast<size_t>(cols));
            for (int64_t r = r0; r < r1; ++r) {
                const float* wr;
                if (w.format == WeightFormat::F32) {
                    wr = reinterpret_cast<const float*>(w.data) + r * cols;
                } else {
                    dequantize_row(w, r, row.data());
                    wr = row.data();
                }
                for (int64_t i = 0; i < n; ++i) y[i * w.rows + r] = cpu::dot_f32(wr, x + i * cols, cols);
            }
        },
        16);
}

}  // namespace sluice::ops
