#include "plan/card.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "plan/projection.h"

namespace sluice {

CardPlan plan_card(const ModelShape& m, const ResidencyPlan& host, uint64_t gpu_memory_bytes, double link_gbps) {
    SLUICE_CHECK(std::isfinite(link_gbps) && link_gbps > 0,
                 "--link: the host-to-device copy rate must be > 0 (e.g. 25GB/s), got ", link_gbps);
    CardPlan c;
    c.budget_bytes = gpu_memory_bytes;
    c.link_gbps = link_gbps;
    c.workspace_bytes = host.activation_bytes;
    SLUICE_CHECK(gpu_memory_bytes > c.workspace_bytes, "--gpu-memory ", format_bytes(gpu_memory_bytes),
                 " does not hold the card's work buffers for this plan's largest pass (about ",
                 format_bytes(c.workspace_bytes), "): give at least ", format_bytes(c.workspace_bytes + (64u << 20)),
                 ", or plan smaller passes (--pass-rows)");
    uint64_t matrices = m.head_bytes;
    for (const auto& [fmt, bytes] : m.spine_matmul_bytes) matrices += bytes;
    c.streamed_bytes = host.spine_streamed_bytes;
    c.spine_matrix_bytes = matrices > c.streamed_bytes ? matrices - c.streamed_bytes : 0;
    uint64_t room = gpu_memory_bytes - c.workspace_bytes;
    c.spine_kept_bytes = std::min(c.spine_matrix_bytes, room);
    room -= c.spine_kept_bytes;
    // a streamed layer's next use comes one pass later, after every other layer and the pass's experts
    const double decode_experts = distinct_experts(double(m.n_experts), double(m.top_k), 1.0) * double(m.n_moe_layers);
    const double one_pass = double(c.streamed_bytes) + decode_experts * double(m.expert_bytes);
    if (c.streamed_bytes > 0 && one_pass <= double(room)) {
        c.streamed_kept_bytes = c.streamed_bytes;
        room -= c.streamed_bytes;
    } else {
        // not kept, the layers' copies still pass through the LRU at every pass and push experts out: measured on
        // an H200 (docs/plan.md), a 6 GiB card whose room was the streamed layers' size kept 9% of weight uses
        room = room > c.streamed_bytes ? room - c.streamed_bytes : 0;
    }
    const uint64_t all = uint64_t(m.n_moe_layers * m.n_experts);
    c.expert_slots = m.expert_bytes ? std::min(all, room / m.expert_bytes) : 0;
    return c;
}

double card_link_bytes(const ModelShape& m, const CardPlan& c, double experts_used, double card_hit_rate) {
    const double h = std::clamp(card_hit_rate, 0.0, 1.0);
    return double(c.spine_matrix_bytes - c.spine_kept_bytes) + double(c.streamed_bytes - c.streamed_kept_bytes) +
           experts_used * (1.0 - h) * double(m.expert_bytes);
}

}  // namespace sluice
