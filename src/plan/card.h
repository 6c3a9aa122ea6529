// `sluice plan --device cuda --gpu-memory SIZE --link RATE`: what the CUDA backend keeps on the card within its
// budget, and the bytes a pass sends across the host-to-device link. It models the backend as it places copies
// today (ops/cuda/backend.h), in this order:
//  - the work buffers (estimated as the host's activation reserve for the plan's largest pass);
//  - copies of the resident spine's matrices (they come from the memory-mapped checkpoint): kept in first-use order
//    and never evicted for new copies, so the part that fits stays and the rest crosses the link at every pass;
//  - the rest is one least-recently-used set of content-keyed copies: the streamed spine layers (each used once a
//    pass) and the experts. The layers stay when the room holds them and a decode pass's experts beside them;
//    otherwise LRU drops each before its next use and they cross the link at every pass, their copies still
//    taking their bytes of the room as they pass through;
//  - experts: LRU over every use (the host cache's hits and misses alike) in the slots left.
// What the drives read does not change with the card: a host miss reads the expert from the drive even when the
// card holds it, and a streamed spine layer is read at every pass (docs/cuda.md, "Left"). The embedding table is
// gathered on the host and never copied.
#pragma once

#include <cstdint>

#include "experts/residency.h"
#include "plan/model_shape.h"

namespace sluice {

struct CardPlan {
    uint64_t budget_bytes = 0;         // --gpu-memory
    uint64_t workspace_bytes = 0;      // work buffers (estimate)
    uint64_t spine_matrix_bytes = 0;   // the resident spine's matrices (LM head included)
    uint64_t spine_kept_bytes = 0;     // ... of which the card keeps
    uint64_t streamed_bytes = 0;       // the streamed spine layers (the host plan's)
    uint64_t streamed_kept_bytes = 0;  // ... kept on the card (all or nothing, see above)
    uint64_t expert_slots = 0;         // expert copies the rest holds (at most every routed expert)
    double link_gbps = 0;              // --link
};

// Throws Error when the budget does not cover the work buffers (naming the least that would) or the link rate is
// not a positive number.
CardPlan plan_card(const ModelShape& m, const ResidencyPlan& host, uint64_t gpu_memory_bytes, double link_gbps);

// Bytes a pass sends to the card: the spine it does not keep, and each expert use the card misses (experts_used:
// distinct experts of the pass over all MoE layers; card_hit_rate: of the card's expert copies).
double card_link_bytes(const ModelShape& m, const CardPlan& c, double experts_used, double card_hit_rate);

}  // namespace sluice
