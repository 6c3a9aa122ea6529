// `sluice plan`'s arithmetic: from a model's shape (plan/model_shape.h), the engine's residency plan for a budget
// (experts/residency.h, the same function the engine calls at load) and a machine's rates (plan/rates.h), the bytes a
// token reads and the time a forward pass takes.
//
// Misses: an expert is a cache hit with probability h = cached experts / all experts (uniform routing; the LRU cache
// holds some set of that size), or, with usage counts (--usage-stats), h = the routing mass of the most-used experts
// that fit (the cache ends up holding the popular ones; an upper bound for LRU). Each miss reads one cache slot.
// Distinct experts a pass of R rows touches per MoE layer: E·(1−(1−k/E)^R) (independent routing), each read once
// and multiplied with R·k/distinct rows on average.
// Time of a pass: compute = Σ matrices bytes / kernel rate at their row count + one call overhead per matmul;
// I/O = missed slot bytes (+ streamed spine) / the drives' rate, plus one read's latency for each MoE layer that
// misses at all (probability 1−h^distinct; its misses are issued together). The engine overlaps them (each layer's misses are
// read while its cache hits and shared expert compute, the next layer's likely experts are read ahead while this
// layer and the next attention compute), so a pass could take max(I/O, compute). On the machine the projection was
// checked on (2 shared vCPUs, a virtual disk: bench/plan_check.py) reads cost CPU time and bench measures little
// overlap, and the sum I/O + compute predicts the measured decode speed better; it is the default, and `overlap`
// (plan --overlap) gives max(I/O, compute), the bound for a machine whose reads take no compute time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "experts/residency.h"
#include "plan/model_shape.h"
#include "plan/rates.h"

namespace sluice {

struct PlanMachine {
    uint64_t memory_bytes = 0;
    std::vector<double> drives_gbps;  // each drive's rate; experts are striped over them (sluice pack --dirs)
    std::string device = "cpu";
    int64_t threads = 0;
    std::optional<MachineRates> rates;  // measured kernel (and drive) rates; none: no time projection
};

struct PlanSettings {
    int64_t ctx = 4096, parallel = 1;  // as --ctx, --parallel for the engine (state reserve)
    int64_t staging_experts = 4;       // StreamingOptions::staging_experts
    int64_t prefill_chunk = 256;       // P: rows per prefill pass
    // rows of the largest pass the engine runs (LoadOptions::max_pass_rows: its activations are reserved); 0: the
    // largest pass projected here (the prefill chunk or the largest batch)
    int64_t pass_rows = 0;
    std::vector<int64_t> batch_sizes = {1, 4, 16, 64, 256};
    bool overlap = false;              // true: max(I/O, compute); false: their sum (see the top of this file)
    std::vector<double> usage_share;   // optional: each expert's share of routing (sums to n_moe_layers), any order
};

struct PassProjection {
    int64_t rows = 0;                     // rows in the pass (B sequences decoding, or P prompt tokens)
    double distinct_experts = 0;          // per MoE layer
    double expert_bytes_read = 0;         // per pass: missed slots
    double spine_bytes_read = 0;          // per pass: streamed spine
    double io_ms = 0, compute_ms = 0, pass_ms = 0;
    double tok_per_s = 0;                 // rows / pass time
    double bytes_read_per_token() const { return (expert_bytes_read + spine_bytes_read) / double(rows); }
};

struct Projection {
    ResidencyPlan plan;
    uint64_t cache_slots = 0;
    double cache_share = 0;   // cached experts / all routed experts
    double hit_rate = 0;      // expected, under the routing model
    std::string hit_model;    // "uniform routing: hit rate = cache share" or the usage-skew form
    double drive_gbps = 0;    // all drives together
    bool timed = false;       // rates were given for this device
    std::string untimed_reason;
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
                            double drive_gbps, int64_t rows, int64_t logit_rows, bool overlap);

std::string projection_text(const ModelShape& m, const PlanMachine& machine, const PlanSettings& s, const Projection& p);
std::string projection_json(const ModelShape& m, const PlanMachine& machine, const PlanSettings& s, const Projection& p);

// "7GB/s", "7 GB/s", "3500MB/s", "7" (GB/s) -> GB/s (decimal, as drives are rated). Throws Error naming the text.
double parse_drive_rate(const std::string& text);

}  // namespace sluice
