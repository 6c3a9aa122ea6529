// Reference twins of MLA's absorption (ops/mla_ops.h), from DeepSeek-V2's description of the absorbed form: in
// double precision, one (row, head) at a time, reading W_UK and W_UV through the reference dequantiser.
#include <vector>

#include "ops/mla_ops.h"
#include "ops/ops.h"

namespace sluice::ops::ref {

void mla_absorb(const MlaHeads& m, const Weight& kv_b, const float* q, int64_t n, float* q_cat) {
    std::vector<float> row(static_cast<size_t>(m.rank));
    std::vector<double> acc(static_cast<size_t>(m.rank));
    for (int64_t r = 0; r < n; ++r)
        for (int64_t h = 0; h < m.heads; ++h) {
            const float* qh = q + (r * m.heads + h) * (m.nope + m.rope);
            float* out = q_cat + (r * m.heads + h) * (m.rank + m.rope);
            std::fill(acc.begin(), acc.end(), 0.0);
            for (int64_t i = 0; i < m.nope; ++i) {
                dequantize_row(kv_b, h * (m.nope + m.v) + i, row.data());
                for (int64_t j = 0; j < m.rank; ++j) acc[size_t(j)] += double(qh[i]) * row[size_t(j)];
            }
            for (int64_t j = 0; j < m.rank; ++j) out[j] = float(acc[size_t(j)]);
            for (int64_t j = 0; j < m.rope; ++j) out[m.rank + j] = qh[m.nope + j];
        }
}

void mla_unabsorb(const MlaHeads& m, const Weight& kv_b, const float* lat, int64_t n, float* o) {
    std::vector<float> row(static_cast<size_t>(m.rank));
    for (int64_t h = 0; h < m.heads; ++h)
        for (int64_t i = 0; i < m.v; ++i) {
            dequantize_row(kv_b, h * (m.nope + m.v) + m.nope + i, row.data());
            for (int64_t r = 0; r < n; ++r) {
                const float* l = lat + (r * m.heads + h) * m.rank;
                double acc = 0;
                for (int64_t j = 0; j < m.rank; ++j) acc += double(row[size_t(j)]) * l[j];
                o[(r * m.heads + h) * m.v + i] = float(acc);
            }
        }
}

}  // namespace sluice::ops::ref
