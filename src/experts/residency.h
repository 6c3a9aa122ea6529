// The residency plan: one memory budget covers everything the process holds. It is filled in order — spine
// (attention, norms, routers, shared experts, embeddings, head), per-sequence state, staging for reads — and
// whatever is left becomes the expert cache; routed experts that do not fit are streamed from SSD.
#pragma once

#include <cstdint>
#include <string>

namespace sluice {

struct ResidencyPlan {
    uint64_t budget_bytes = 0;
    uint64_t spine_bytes = 0;          // resident non-expert weights
    uint64_t state_bytes = 0;          // reserve for sequence state (KV / latent caches) and activations
    uint64_t staging_bytes = 0;        // read buffers for experts that miss the cache
    uint64_t expert_cache_bytes = 0;   // what is left
    uint64_t min_bytes() const { return spine_bytes + state_bytes + staging_bytes; }
    std::string describe() const;      // human-readable, one line per item
};

// Throws Error when the budget is below the minimum working set, saying what the minimum is.
ResidencyPlan plan_residency(uint64_t budget_bytes, uint64_t spine_bytes, uint64_t state_bytes, uint64_t staging_bytes);

// "64G", "512M", "1.5GiB", "123456" -> bytes (K/M/G/T are powers of 1024). Throws Error naming the text.
uint64_t parse_size(const std::string& text);
std::string format_bytes(uint64_t bytes);  // "1.50 GiB"

// A safe default budget: 80% of MemAvailable (falls back to 4 GiB if /proc/meminfo is unreadable).
uint64_t default_memory_budget();

}  // namespace sluice
