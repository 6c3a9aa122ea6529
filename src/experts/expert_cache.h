// A byte-budgeted cache of expert weights in fixed-size slots carved from one aligned allocation, so the memory it
// holds is exactly what the budget allows, by construction. A replacement policy (LRU, frequency-aware) picks
// victims among unpinned slots; experts in use by the current step are pinned. Experts can also be held (pinned
// against eviction until released, e.g. the most-used experts from a usage statistics file). Per-layer statistics.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/huge_pages.h"
#include "ops/ops.h"

namespace sluice {

struct ExpertKey {
    int32_t layer = 0, expert = 0;
    bool operator==(const ExpertKey&) const = default;
    uint64_t packed() const { return uint64_t(uint32_t(layer)) << 32 | uint32_t(expert); }
};

// Chooses which slot to evict. Slots are identified by index; the policy sees every access.
class CachePolicy {
public:
    virtual ~CachePolicy() = default;
    virtual std::string name() const = 0;
    virtual void on_insert(size_t slot, ExpertKey key) = 0;
    virtual void on_hit(size_t slot, ExpertKey key) = 0;
    virtual void on_evict(size_t slot) = 0;
    virtual void on_miss(ExpertKey key) {}  // key was asked for and is not cached (it may be inserted next)
    // Whether key, arriving when the cache is full, may take `victim`'s slot; if not, insert() returns nullptr and
    // the caller reads key into staging (used once, not cached).
    virtual bool admit(ExpertKey key, size_t victim) { return true; }
    // The slot to evict among those with evictable[slot] == true (at least one is).
    virtual size_t victim(const std::vector<uint8_t>& evictable) = 0;
};

std::unique_ptr<CachePolicy> make_lru_policy(size_t n_slots);
// Least-frequently-used with periodic halving of counts (aging), ties broken by recency. Counts survive eviction
// (keyed by expert), so an expert that keeps coming back wins its slot back.
std::unique_ptr<CachePolicy> make_lfu_policy(size_t n_slots);
// Expected next use (docs/routing.md): the forward pass visits the MoE layers in a cycle, so an expert's next use is
// at best when its layer comes round again, d layer visits away, and on average d + L (1 - p) / p visits away where
// p is how often its layer's visits chose it (a per-visit moving average, weight 0.1 to the newest visit) and L the
// number of MoE layers seen. Evicts the largest; ties: least recent. Unlike LRU it keeps the experts the next layers
// need over the ones the layer just run used, which LRU evicts every token once the cache is smaller than a
// token's working set (L * top_k experts). Admission: a newcomer whose own expected next use is farther than the
// victim's is not cached (Belady's optimum declines such experts too); its use is still counted.
std::unique_ptr<CachePolicy> make_next_use_policy(size_t n_slots);
// next-use, with the chance q that the next visit of an expert's layer chooses it predicted from the layer's latest
// visit through transition counts (docs/routing.md): q = mean over the experts f the latest visit chose of
// (N[f][e] + 2 p) / (M[f] + 2), where M[f] counts the visits that chose f and were followed by another visit of the
// layer and N[f][e] those whose next visit chose e (counted online, once a visit is followed by one). Evicts the
// largest d + (1 - q) L / p: a next-use estimate whose first visit is predicted from what the layer just chose (the
// trained model's experts are chosen again by the next token about twice as often as on average). Admission as
// next-use. Memory: one E x E table of 16-bit counts per MoE layer (E = the largest expert id seen + 1, rounded up to
// 64): 8 KiB a layer for 24 experts, 1.5 MiB for 896 (Kimi K3: 141 MiB in all), reserved in the memory plan by
// cache_policy_bytes.
std::unique_ptr<CachePolicy> make_markov_policy(size_t n_slots);
// "lru" | "lfu" | "next-use" | "markov"
std::unique_ptr<CachePolicy> make_cache_policy(const std::string& name, size_t n_slots);
// The most memory a policy's own bookkeeping can take for `moe_layers` layers of `experts` experts (0 for those
// whose state is per slot): the memory plan reserves it beside the cache.
uint64_t cache_policy_bytes(const std::string& name, int64_t moe_layers, int64_t experts);

struct LayerCacheStats {
    uint64_t hits = 0, misses = 0, evictions = 0;
    uint64_t held_hits = 0;  // hits on held experts (counted in hits too)
};

class ExpertCache {
public:
    // slot_bytes is rounded up to 4 KiB; n_slots = budget_bytes / slot_bytes (may be 0: everything streams).
    ExpertCache(uint64_t budget_bytes, uint64_t slot_bytes, int64_t n_layers, std::unique_ptr<CachePolicy> policy);
    ~ExpertCache();
    ExpertCache(const ExpertCache&) = delete;
    ExpertCache& operator=(const ExpertCache&) = delete;

    size_t n_slots() const { return n_slots_; }
    uint64_t slot_bytes() const { return slot_bytes_; }
    uint64_t allocated_bytes() const { return uint64_t(n_slots_) * slot_bytes_; }

    // The slot holding key (counted as a hit and pinned), or nullptr (counted as a miss).
    uint8_t* acquire(ExpertKey key);
    // A slot for key's bytes, evicting an unpinned victim; pinned. nullptr if every slot is pinned (or none exist),
    // or when the policy does not admit key over the victim.
    // The caller fills it and must call unpin() when done; if the fill fails, call drop(key).
    uint8_t* insert(ExpertKey key);
    // Pins a cached expert without counting a use (a read-ahead hint keeps what it found resident until its layer
    // asks); false when key is not cached. Undone by unpin().
    bool pin(ExpertKey key);
    void unpin(ExpertKey key);
    void drop(ExpertKey key);  // forget key (e.g. its read failed); unpins its slot
    bool contains(ExpertKey key) const { return where_.count(key.packed()) != 0; }

    // Holding: a cached expert is kept against eviction until released (or dropped). hold() returns false when key
    // is not cached. insert() never evicts a held expert, so holding every slot makes inserts return nullptr.
    bool hold(ExpertKey key);
    void release(ExpertKey key);
    bool held(ExpertKey key) const;
    size_t n_held() const { return n_held_; }
    // Every cached expert of `layer`, with whether it is held.
    std::vector<std::pair<ExpertKey, bool>> residents(int32_t layer) const;

    const std::vector<LayerCacheStats>& layer_stats() const { return stats_; }
    LayerCacheStats total_stats() const;
    std::string policy_name() const { return policy_->name(); }

private:
    uint64_t slot_bytes_;
    size_t n_slots_;
    uint8_t* memory_ = nullptr;
    std::unique_ptr<BackgroundPopulate> populate_;  // faults the slots in ahead of their first reads
    ops::PinnedRegion pinned_;  // page-locked while the CUDA backend copies experts from the slots
    uint64_t content_space_ = 0;  // slots are registered by content (core/stable_memory.h): device copies outlive them
    std::unique_ptr<CachePolicy> policy_;
    std::vector<ExpertKey> key_of_;       // [n_slots]
    std::vector<uint8_t> used_;           // [n_slots]
    std::vector<int32_t> pins_;           // [n_slots]
    std::vector<uint8_t> held_;           // [n_slots]
    size_t n_held_ = 0;
    std::unordered_map<uint64_t, size_t> where_;
    std::vector<LayerCacheStats> stats_;
};

}  // namespace sluice
