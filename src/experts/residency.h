// The residency plan: one memory budget covers everything the process holds. It is filled in order — spine
// (attention, norms, routers, shared experts, embeddings, head), per-sequence state, staging for reads — and
// whatever is left becomes the expert cache; routed experts that do not fit are streamed from SSD. When the whole
// spine does not fit, the big matrices of the last layers are streamed too: read layer by layer into two slots
// ahead of use (see spine_streamer.h), so only the first layers' matrices stay resident.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace sluice {

struct ResidencyPlan {
    uint64_t budget_bytes = 0;
    uint64_t spine_bytes = 0;          // resident non-expert weights (fixed part + resident layers)
    uint64_t state_bytes = 0;          // reserve for sequence state (KV / latent caches) and activations
    uint64_t prefix_cache_bytes = 0;   // ... of which the engine's prefix cache (reported on its own line)
    uint64_t activation_bytes = 0;     // ... of which a forward pass's activations (the model's scratch arena)
    uint64_t staging_bytes = 0;        // read buffers for experts that miss the cache
    uint64_t expert_cache_bytes = 0;   // what is left
    // Spine streaming (all zero when the whole spine is resident).
    int64_t first_streamed_layer = -1;   // layers >= this have their matrices streamed; -1: none
    int64_t n_layers = 0;
    uint64_t spine_streamed_bytes = 0;   // read from disk on every forward pass
    uint64_t spine_slot_bytes = 0;       // the two slots the streamed layers are read into
    uint64_t spine_fixed_bytes = 0;      // spine that never streams (embeddings, head, norms, routers, ...)
    std::vector<uint64_t> layer_bytes;   // streamable matrices per layer, as read (4 KiB-aligned extents)
    uint64_t min_bytes() const { return spine_bytes + spine_slot_bytes + state_bytes + staging_bytes; }
    bool streams_spine() const { return first_streamed_layer >= 0; }
    std::string describe() const;      // human-readable, one line per item
};

// spine_fixed_bytes: spine that always stays resident (embeddings, head, norms, routers, ...); layer_bytes[l]: the
// streamable matrices of layer l (empty span: nothing may stream). Keeps as many leading layers resident as fit;
// throws Error when even streaming every layer does not fit, saying what the minimum is.
// force_first_streamed >= 0 streams layers from there on even if more would fit (tests; must still fit).
ResidencyPlan plan_residency(uint64_t budget_bytes, uint64_t spine_fixed_bytes, std::span<const uint64_t> layer_bytes,
                             uint64_t state_bytes, uint64_t staging_bytes, int64_t force_first_streamed = -1);

// "64G", "512M", "1.5GiB", "123456" -> bytes (K/M/G/T are powers of 1024). Throws Error naming the text.
uint64_t parse_size(const std::string& text);
std::string format_bytes(uint64_t bytes);  // "1.50 GiB"

// A safe default budget: 80% of MemAvailable (falls back to 4 GiB if /proc/meminfo is unreadable).
uint64_t default_memory_budget();

}  // namespace sluice
