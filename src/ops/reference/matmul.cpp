#include <vector>

#include "ops/ops.h"

namespace sluice::ops::ref {

void matmul(const Weight& w, const float* x, int64_t n, float* y) {
    std::vector<float> row(static_cast<size_t>(w.cols));
    for (int64_t r = 0; r < w.rows; ++r) {
        dequantize_row(w, r, row.data());
        for (int64_t i = 0; i < n; ++i) {
            const float* xi = x + i * w.cols;
            double acc = 0;  // the oracle accumulates in double
            for (int64_t c = 0; c < w.cols; ++c) acc += double(row[c]) * double(xi[c]);
            y[i * w.rows + r] = float(acc);
        }
    }
}

}  // namespace sluice::ops::ref
