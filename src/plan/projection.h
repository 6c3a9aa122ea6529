// `sluice plan`'s arithmetic: from a model's shape (plan/model_shape.h), the engine's residency plan for a budget
// (experts/residency.h, the same function the engine calls at load) and a machine's rates (plan/rates.h), the bytes a
// token reads and the time a forward pass takes.
//
// Hit rate: the engine's replacement policy run over a stream of routing decisions at the plan's cache size
// (plan/cache_sim.h), per pass size: uniform routing by default, the measured counts of --usage-stats, or for decode
// a trace the engine recorded (--trace). Distinct experts a pass of R rows touches per MoE layer: E·(1−(1−k/E)^R)
// (independent routing), each read once and multiplied with R·k/distinct rows on average.
//
// Time of a pass (the default, "pipeline"): what the engine overlaps and what it does not. Per MoE layer, the spine's
// matrices (attention, router, shared expert: c_s) run before the layer's misses are known; then the misses are all
// issued at once and the experts are computed one after another, the cached ones first and each missed one as its
// bytes land: with d distinct experts, m of them missed (m = d·(1−h)), c_e the compute of one expert, τ the read of
// one slot at the drives' rate and λ the time until the first miss lands (one read alone: max(latency, τ), times the
// chance that the layer misses at all),
//   layer = c_s + max(d·c_e, λ + m·c_e, λ + (m−1)·τ + c_e)
// (compute-bound; latency then compute; drive-bound with the last expert's compute behind the last read). A streamed
// spine shares the drives, so a pass takes at least all its bytes at the drives' rate. `overlap` (plan --overlap)
// gives max(I/O, compute) instead, the bound for perfect overlap; `serial`, their sum.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "experts/expert_trace.h"
#include "experts/residency.h"
#include "plan/card.h"
#include "plan/model_shape.h"
#include "plan/rates.h"

namespace sluice {

struct PlanMachine {
    uint64_t memory_bytes = 0;
    std::vector<double> drives_gbps;  // each drive's rate; experts are striped over them (sluice pack --dirs)
    std::string device = "cpu";
    int64_t threads = 0;
    std::optional<MachineRates> rates;  // measured kernel (and drive) rates; none: no time projection
    uint64_t gpu_memory_bytes = 0;      // --gpu-memory (device cuda): the card's budget; 0: no card tier planned
    double link_gbps = 0;               // --link: host-to-device copy rate, with --gpu-memory
};

struct PlanSettings {
    int64_t ctx = 4096, parallel = 1;  // as --ctx, --parallel for the engine (state reserve)
    int64_t staging_experts = 4;       // StreamingOptions::staging_experts
    int64_t prefill_chunk = 256;       // P: rows per prefill pass
    // rows of the largest pass the engine runs (LoadOptions::max_pass_rows: its activations are reserved); 0: the
    // largest pass projected here (the prefill chunk or the largest batch)
    int64_t pass_rows = 0;
    std::vector<int64_t> batch_sizes = {1, 4, 16, 64, 256};
    std::string timing = "pipeline";   // "pipeline" | "overlap" (max(I/O, compute)) | "serial" (their sum)
    std::vector<double> usage_share;   // optional: [n_moe_layers * n_experts] each expert's share of its layer's routing
    const ExpertTrace* trace = nullptr;  // optional: routing the engine recorded on this model (decode hit rate)
    std::string cache_policy = "lru";  // the engine's --cache-policy
    // per row of a pass: compute outside the weight matmuls and expert groups (norms, attention, routing, sampling,
    // the engine), as `bench` measures it for this model ("the rest"); added to timed passes only
    double token_overhead_ms = 0;
};

struct PassProjection {
    int64_t rows = 0;                     // rows in the pass (B sequences decoding, or P prompt tokens)
    double distinct_experts = 0;          // per MoE layer
    double hit_rate = 0;                  // of the cache, for passes of this size (plan/cache_sim.h)
    double expert_bytes_read = 0;         // per pass: missed slots
    double spine_bytes_read = 0;          // per pass: streamed spine
    double io_ms = 0, compute_ms = 0, pass_ms = 0;
    double card_hit_rate = 0;             // with a card (plan/card.h): its expert copies' hit rate
    double link_bytes = 0, link_ms = 0;   // ... the bytes the pass sends to the card, at --link; pass_ms >= link_ms
    double tok_per_s = 0;                 // rows / pass time
    double bytes_read_per_token() const { return (expert_bytes_read + spine_bytes_read) / double(rows); }
};

struct Projection {
    ResidencyPlan plan;
    uint64_t cache_slots = 0;
    double cache_share = 0;   // cached experts / all routed experts
    double hit_rate = 0;      // decode's (the other passes' are in their PassProjection)
    double popular_share = 0; // with usage shares: the routing share of the most-used experts that fit (a bound)
    std::string hit_model;    // how the hit rates were found
    double drive_gbps = 0;    // all drives together
    bool timed = false;       // rates were given for this device
    std::string untimed_reason;
    std::optional<CardPlan> card;  // --gpu-memory
    PassProjection decode;    // B = 1
    PassProjection prefill;   // one chunk of P prompt tokens
    std::vector<PassProjection> batches;
};

// Throws Error when the figures are impossible (a drive rate <= 0, no drive) or when the budget is below the
// working set (the message names the minimum budget, as the engine's does).
Projection project(const ModelShape& m, const PlanMachine& machine, const PlanSettings& s);

// The pieces, for tests.
double distinct_experts(double n_experts, double top_k, double rows);  // E·(1−(1−k/E)^rows)
// Hit rate when the cache holds `slots` experts of `n` with these routing shares (any scale; sorted here).
double skewed_hit_rate(std::vector<double> shares, double slots);
PassProjection project_pass(const ModelShape& m, const ResidencyPlan& plan, const MachineRates& rates, double hit_rate,
                            double drive_gbps, int64_t rows, int64_t logit_rows, const std::string& timing);

std::string projection_text(const ModelShape& m, const PlanMachine& machine, const PlanSettings& s, const Projection& p);
std::string projection_json(const ModelShape& m, const PlanMachine& machine, const PlanSettings& s, const Projection& p);

// A trace's routing as usage shares ([n_moe_layers * n_experts], layers in order); Error when its layers do not fit.
std::vector<double> trace_usage_shares(const ExpertTrace& t, const ModelShape& m);
// Error naming the file unless the trace's shape (layers, experts, architecture) is this model's and it has a decode
// pass. (The CLI also checks the checkpoint's fingerprint when the model is a folder.)
void check_trace_shape(const ExpertTrace& t, const std::string& path, const ModelShape& m);

// "7GB/s", "7 GB/s", "3500MB/s", "7" (GB/s) -> GB/s (decimal, as drives are rated). Throws Error naming the flag
// and the text.
double parse_drive_rate(const std::string& text, const std::string& flag = "--drives");

}  // namespace sluice
