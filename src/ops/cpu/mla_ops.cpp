// MLA's absorption on the CPU (contracts in ops/mla_ops.h): heads split over the thread pool, each head's W_UK^h or
// W_UV^h dequantised once to f32 for all rows.
#include <algorithm>
#include <vector>

#include "core/error.h"
#include "ops/cpu/simd.h"
#include "ops/mla_ops.h"
#include "ops/ops.h"

namespace sluice::ops {

namespace {
void check_shapes(const MlaHeads& m, const Weight& kv_b) {
    SLUICE_CHECK(kv_b.rows == m.heads * (m.nope + m.v) && kv_b.cols == m.rank, "MLA: kv_b_proj is ", kv_b.rows, "x",
                 kv_b.cols, ", want ", m.heads * (m.nope + m.v), "x", m.rank);
}
}  // namespace

void mla_absorb(const MlaHeads& m, const Weight& kv_b, const float* q, int64_t n, float* q_cat, ThreadPool& pool) {
    check_shapes(m, kv_b);
    const int64_t H = m.heads, dqk = m.nope + m.rope, cw = m.rank + m.rope, r_kv = m.rank, nope = m.nope;
    pool.parallel_for(H, [&](int64_t h0, int64_t h1) {
        // one head's dequantised W_UK per thread, kept between calls (no allocation once it has its size)
        thread_local std::vector<float> wk;
        if (wk.size() < size_t(nope * r_kv)) wk.resize(size_t(nope * r_kv));
        for (int64_t h = h0; h < h1; ++h) {
            for (int64_t i = 0; i < nope; ++i) dequantize_row(kv_b, h * (nope + m.v) + i, wk.data() + i * r_kv);
            for (int64_t r = 0; r < n; ++r) {
                const float* qn = q + (r * H + h) * dqk;
                float* dst = q_cat + (r * H + h) * cw;
                std::fill(dst, dst + r_kv, 0.0f);
                for (int64_t i = 0; i < nope; ++i) {
                    const float qi = qn[i];
                    const float* wr = wk.data() + i * r_kv;
                    for (int64_t j = 0; j < r_kv; ++j) dst[j] += qi * wr[j];
                }
                std::copy_n(qn + nope, m.rope, dst + r_kv);
            }
        }
    });
}

void mla_unabsorb(const MlaHeads& m, const Weight& kv_b, const float* lat, int64_t n, float* o, ThreadPool& pool) {
    check_shapes(m, kv_b);
    const int64_t H = m.heads, r_kv = m.rank, dv = m.v;
    pool.parallel_for(H, [&](int64_t h0, int64_t h1) {
        thread_local std::vector<float> wv;  // as wk above
        if (wv.size() < size_t(dv * r_kv)) wv.resize(size_t(dv * r_kv));
        for (int64_t h = h0; h < h1; ++h) {
            for (int64_t i = 0; i < dv; ++i) dequantize_row(kv_b, h * (m.nope + dv) + m.nope + i, wv.data() + i * r_kv);
            for (int64_t r = 0; r < n; ++r) {
                const float* l = lat + (r * H + h) * r_kv;
                float* dst = o + (r * H + h) * dv;
                for (int64_t i = 0; i < dv; ++i) dst[i] = cpu::dot_f32(wv.data() + i * r_kv, l, r_kv);
            }
        }
    });
}

}  // namespace sluice::ops
