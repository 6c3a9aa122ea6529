// The expert cache's hit rate for `sluice plan`: the engine's own replacement policy (experts/expert_cache.h,
// make_cache_policy) run over a stream of routing decisions, in the engine's access order
// (experts/streaming_expert_source.cpp): per MoE layer, each distinct expert of the pass is looked up in ascending id
// (a hit is pinned and touched), then the misses are inserted in that order, each taking a free slot or evicting an
// unpinned victim; the layer's experts are unpinned when it ends. Only the bookkeeping is kept, no expert bytes.
//
// Why not hit rate = cache share: a pass visits the MoE layers in a cycle, so between two uses of an expert the
// cache sees at least every other layer's experts of one token. Once the cache holds fewer than that, LRU keeps
// almost nothing a next token asks for, however much it holds: a K3-like synth (top 16 of 32, 3 MoE layers) with 20%
// of its experts cached measured a 0% hit rate, and 75% with 80% cached. Simulating the cycle gives both (0% and
// 75.1%) where the cache share said 20% and 80%.
//
// The stream is either synthetic (each row of a pass chooses top_k distinct experts per MoE layer, uniformly or with
// probabilities from measured usage counts, independently of the other rows and passes) or a trace the engine
// recorded (--trace-experts), replayed pass by pass. Deterministic for a seed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "experts/expert_trace.h"

namespace sluice {

struct CacheSimOptions {
    std::string policy = "lru";      // as --cache-policy
    uint64_t seed = 1;
    uint64_t measured_accesses = 300000;  // expert lookups counted after the warm-up (the estimate's sample)
    // Bound on the simulation's work (slot visits of victim searches, which are O(slots) each as in the engine):
    // a huge cache is simulated for fewer passes (never fewer than 8 measured).
    uint64_t max_work = uint64_t(1) << 28;
    bool lru_through_policy = false;  // tests: LRU through LruPolicy's scan instead of the recency list (same victims)
};

struct CacheSimResult {
    double hit_rate = 0;
    uint64_t accesses = 0;   // lookups measured
    int64_t passes = 0;      // passes measured
};

// shares: [n_moe_layers * n_experts], each layer's probabilities that one row chooses each expert (they are scaled
// so that each layer's sum to top_k and capped at 1); empty: uniform routing. `rows` rows per pass.
CacheSimResult simulate_cache(int64_t n_moe_layers, int64_t n_experts, int64_t top_k,
                              const std::vector<double>& shares, uint64_t slots, int64_t rows,
                              const CacheSimOptions& options);

// Replays a recorded trace: its passes once in order to warm the cache, then again, measuring the lookups of
// records with `rows` rows (0: every record).
CacheSimResult replay_cache(const ExpertTrace& trace, uint64_t slots, int64_t rows, const std::string& policy);

}  // namespace sluice
