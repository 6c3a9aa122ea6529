#include "models/blocks/attn_res.h"

#include "core/error.h"
#include "core/phase_times.h"
#include "ops/attn_res.h"

namespace sluice {

void attn_res(const float* running, const std::vector<const float*>& blocks, const AttnResWeights& w, int64_t n,
              int64_t d, float eps, float* out, ThreadPool& pool) {
    phase_times::Scope timed(phase_times::kAttnRes);
    const int64_t J = int64_t(blocks.size()) + 1;
    SLUICE_CHECK(J <= ops::k_attn_res_max_candidates, "attn_res: ", J, " candidates");
    const float* cand[ops::k_attn_res_max_candidates];
    for (int64_t j = 0; j + 1 < J; ++j) cand[j] = blocks[size_t(j)];
    cand[J - 1] = running;
    ops::attn_res(cand, J, w.norm.data(), w.proj.data(), n, d, eps, out, pool);
}

}  // namespace sluice
