#include "models/forward_common.h"

#include "ops/ops.h"

namespace sluice {

void embed_rows(const Weight& embed, const Batch& batch, int64_t d, float* x) {
    for (int64_t i = 0; i < batch.size(); ++i) ops::dequantize_row(embed, batch.tokens[size_t(i)], x + i * d);
}

void head_logits(const float* x, const Batch& batch, int64_t d, const std::vector<float>& norm, float eps,
                 const Weight& lm_head, ExecContext& ctx, std::vector<float>& logits) {
    const int64_t nl = batch.n_logits();
    ScratchArena::Scope scope(ctx.arena());
    float* hl = ctx.arena().f32(batch.size() * d);
    for (int64_t i = 0, j = 0; i < batch.size(); ++i)
        if (batch.want_logits[size_t(i)]) ops::rms_norm(x + i * d, norm.data(), 1, d, eps, hl + d * j++);
    logits.resize(size_t(nl * lm_head.rows));
    if (nl > 0) ops::matmul(lm_head, hl, nl, logits.data(), ctx);
}

}  // namespace sluice
