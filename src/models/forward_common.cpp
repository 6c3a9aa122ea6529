#include "models/forward_common.h"

#include "ops/ops.h"

namespace sluice {

void head_logits(const float* x, const Batch& batch, int64_t d, const std::vector<float>& norm, float eps,
                 const Weight& lm_head, ThreadPool& pool, std::vector<float>& logits) {
    const int64_t nl = batch.n_logits();
    std::vector<float> hl(static_cast<size_t>(nl * d));
    for (int64_t i = 0, j = 0; i < batch.size(); ++i)
        if (batch.want_logits[size_t(i)]) ops::rms_norm(x + i * d, norm.data(), 1, d, eps, hl.data() + d * j++);
    logits.resize(size_t(nl * lm_head.rows));
    if (nl > 0) ops::matmul(lm_head, hl.data(), nl, logits.data(), pool);
}

}  // namespace sluice
