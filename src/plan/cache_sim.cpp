#include "plan/cache_sim.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <unordered_map>

#include "core/error.h"
#include "experts/expert_cache.h"

namespace sluice {

namespace {

// ExpertCache's slot bookkeeping (expert_cache.cpp: acquire, insert, unpin) without the bytes. LRU is kept as a
// recency list instead of LruPolicy's per-slot clocks: the same victim (the least recent unpinned slot; clocks never
// tie), found from the list's old end instead of a scan of every slot, which large caches and passes of many rows
// could not afford (K3 with 30,000 slots and a 256-row pass: 80,000 evictions a pass).
class SimCache {
public:
    SimCache(uint64_t slots, const std::string& policy, bool lru_list = true)
        : n_(size_t(slots)), lru_(lru_list && policy == "lru"), policy_(make_cache_policy(policy, size_t(slots))), key_of_(n_),
          pins_(n_, 0), evictable_(n_, 1), prev_(n_ + 1), next_(n_ + 1) {
        prev_[n_] = next_[n_] = n_;  // n_: the list's head (next_: oldest, prev_: newest)
    }

    bool acquire(ExpertKey key) {
        auto it = where_.find(key.packed());
        if (it == where_.end()) {
            policy_->on_miss(key);
            return false;
        }
        pin(it->second);
        touch(it->second, key, false);
        return true;
    }
    // Returns whether key got a slot (pinned); otherwise the engine reads it into staging, uncached.
    bool insert(ExpertKey key) {
        if (n_ == 0) return false;
        size_t slot = used_;
        if (used_ == n_) {
            if (n_pinned_ == n_) return false;
            if (lru_) {
                slot = next_[n_];
                while (!evictable_[slot]) slot = next_[slot], ++work_;  // a pinned slot is among the newest
                unlink(slot);
            } else {
                work_ += n_;  // the policy's victim search
                slot = policy_->victim(evictable_);
                SLUICE_ASSERT(slot < n_ && evictable_[slot], "policy chose a pinned slot");
                if (!policy_->admit(key, slot)) return false;
                policy_->on_evict(slot);
            }
            where_.erase(key_of_[slot].packed());
            ++evictions_;
        } else {
            ++used_;
        }
        pin(slot);
        key_of_[slot] = key;
        where_[key.packed()] = slot;
        touch(slot, key, true);
        return true;
    }
    void unpin(ExpertKey key) {
        auto it = where_.find(key.packed());
        if (it == where_.end() || pins_[it->second] == 0) return;
        if (--pins_[it->second] == 0) {
            evictable_[it->second] = 1;
            --n_pinned_;
        }
    }
    bool full() const { return used_ == n_; }
    uint64_t evictions() const { return evictions_; }
    uint64_t work() const { return work_; }

    // One layer's lookups in the engine's order; returns its hits.
    uint64_t layer(int32_t layer, const std::vector<int32_t>& distinct_ascending) {
        uint64_t hits = 0;
        misses_.clear();
        for (int32_t e : distinct_ascending) {
            if (acquire({layer, e})) ++hits;
            else misses_.push_back(e);
        }
        for (int32_t e : misses_) insert({layer, e});
        for (int32_t e : distinct_ascending) unpin({layer, e});
        return hits;
    }

private:
    void unlink(size_t s) {
        next_[prev_[s]] = next_[s];
        prev_[next_[s]] = prev_[s];
    }
    void touch(size_t s, ExpertKey key, bool inserted) {
        if (!lru_) {
            if (inserted) policy_->on_insert(s, key);
            else policy_->on_hit(s, key);
            return;
        }
        if (!inserted) unlink(s);
        prev_[s] = prev_[n_];  // to the newest end
        next_[s] = n_;
        next_[prev_[n_]] = s;
        prev_[n_] = s;
    }
    void pin(size_t slot) {  // evictable_ is kept in step, so a victim search does not rebuild it
        if (pins_[slot]++ == 0) {
            evictable_[slot] = 0;
            ++n_pinned_;
        }
    }
    size_t n_, used_ = 0, n_pinned_ = 0;
    bool lru_;
    std::unique_ptr<CachePolicy> policy_;
    std::vector<ExpertKey> key_of_;
    std::vector<int32_t> pins_;
    std::vector<uint8_t> evictable_;
    std::unordered_map<uint64_t, size_t> where_;
    std::vector<size_t> prev_, next_;  // LRU's recency list over slots, with n_ as its head
    std::vector<int32_t> misses_;
    uint64_t evictions_ = 0, work_ = 0;
};

// Draws each pass's distinct experts per layer.
class RoutingDraw {
public:
    RoutingDraw(int64_t layers, int64_t experts, int64_t top_k, const std::vector<double>& shares, int64_t rows,
                uint64_t seed)
        : L_(layers), E_(experts), k_(std::min(top_k, experts)), rows_(rows), rng_(seed), order_(size_t(experts)),
          keys_(size_t(experts)) {
        std::iota(order_.begin(), order_.end(), 0);
        if (!shares.empty()) {
            SLUICE_CHECK(int64_t(shares.size()) == layers * experts, "cache simulation: ", shares.size(),
                         " usage shares for ", layers, " x ", experts, " experts");
            p_.resize(shares.size());
            for (int64_t l = 0; l < layers; ++l) {
                double sum = 0;
                for (int64_t e = 0; e < experts; ++e) sum += std::max(0.0, shares[size_t(l * experts + e)]);
                for (int64_t e = 0; e < experts; ++e) {
                    const double s = std::max(0.0, shares[size_t(l * experts + e)]);
                    p_[size_t(l * experts + e)] = sum > 0 ? std::min(1.0, s / sum * double(k_)) : double(k_) / double(E_);
                }
            }
        }
    }

    // Ascending distinct experts that `rows` rows choose in MoE layer l (0-based among MoE layers).
    void draw(int64_t l, std::vector<int32_t>& out) {
        out.clear();
        std::uniform_real_distribution<double> u(0.0, 1.0);
        if (rows_ > 16) {  // many rows: each expert is in the union with 1 - (1 - p)^rows, independently
            for (int64_t e = 0; e < E_; ++e) {
                const double p = p_.empty() ? double(k_) / double(E_) : p_[size_t(l * E_ + e)];
                if (u(rng_) < 1.0 - std::pow(1.0 - p, double(rows_))) out.push_back(int32_t(e));
            }
            return;
        }
        seen_.assign(size_t(E_), 0);
        for (int64_t r = 0; r < rows_; ++r) {
            if (p_.empty()) {  // k distinct of E uniformly: a partial Fisher-Yates shuffle
                for (int64_t i = 0; i < k_; ++i) {
                    std::uniform_int_distribution<int64_t> pick(i, E_ - 1);
                    std::swap(order_[size_t(i)], order_[size_t(pick(rng_))]);
                    seen_[size_t(order_[size_t(i)])] = 1;
                }
            } else {  // k distinct with weights p, without replacement (Efraimidis-Spirakis keys: -log(u) / p)
                for (int64_t e = 0; e < E_; ++e) {
                    const double p = p_[size_t(l * E_ + e)];
                    keys_[size_t(e)] = {p > 0 ? -std::log(1.0 - u(rng_)) / p : INFINITY, int32_t(e)};
                }
                std::nth_element(keys_.begin(), keys_.begin() + k_ - 1, keys_.end());
                for (int64_t i = 0; i < k_; ++i)
                    if (std::isfinite(keys_[size_t(i)].first)) seen_[size_t(keys_[size_t(i)].second)] = 1;
            }
        }
        for (int64_t e = 0; e < E_; ++e)
            if (seen_[size_t(e)]) out.push_back(int32_t(e));
    }

private:
    int64_t L_, E_, k_, rows_;
    std::mt19937_64 rng_;
    std::vector<double> p_;
    std::vector<int32_t> order_;
    std::vector<std::pair<double, int32_t>> keys_;
    std::vector<uint8_t> seen_;
};

}  // namespace

CacheSimResult simulate_cache(int64_t n_moe_layers, int64_t n_experts, int64_t top_k,
                              const std::vector<double>& shares, uint64_t slots, int64_t rows,
                              const CacheSimOptions& o) {
    SLUICE_CHECK(n_moe_layers > 0 && n_experts > 0 && top_k > 0 && rows > 0, "cache simulation: no routed experts");
    CacheSimResult r;
    if (slots >= uint64_t(n_moe_layers * n_experts)) {  // everything fits: every lookup hits once warm
        r.hit_rate = 1.0;
        return r;
    }
    SimCache cache(slots, o.policy, !o.lru_through_policy);
    RoutingDraw routing(n_moe_layers, n_experts, top_k, shares, rows, o.seed);
    std::vector<int32_t> distinct;
    auto pass = [&](uint64_t& hits, uint64_t& accesses) {
        for (int64_t l = 0; l < n_moe_layers; ++l) {
            routing.draw(l, distinct);
            hits += cache.layer(int32_t(l), distinct);
            accesses += distinct.size();
        }
    };
    // Warm-up: fill the cache and turn it over by half, or stop when it stops changing.
    uint64_t warm_hits = 0, warm_accesses = 0;
    for (int64_t p = 0; p < 50000; ++p) {
        const uint64_t before = warm_accesses - warm_hits;
        pass(warm_hits, warm_accesses);
        const bool no_miss = warm_accesses - warm_hits == before;
        if (p >= 4 && ((cache.full() && cache.evictions() >= slots / 2) || no_miss)) break;
        if (cache.work() > o.max_work / 2) break;
    }
    uint64_t hits = 0;
    while (r.passes < 8 || (r.accesses < o.measured_accesses && cache.work() < o.max_work)) {
        pass(hits, r.accesses);
        ++r.passes;
    }
    r.hit_rate = r.accesses ? double(hits) / double(r.accesses) : 0.0;
    return r;
}

CacheSimResult replay_cache(const ExpertTrace& trace, uint64_t slots, int64_t rows, const std::string& policy) {
    CacheSimResult r;
    SimCache cache(slots, policy);
    std::vector<int32_t> distinct;
    uint64_t hits = 0;
    for (int round = 0; round < 2; ++round)
        for (const TraceRecord& rec : trace.records) {
            distinct.clear();
            for (const auto& [e, flags] : rec.distinct) distinct.push_back(int32_t(e));
            const uint64_t h = cache.layer(int32_t(rec.layer), distinct);
            if (round == 1 && (rows == 0 || int64_t(rec.n_rows) == rows)) {
                hits += h;
                r.accesses += distinct.size();
            }
        }
    int64_t last_pass = -1;
    for (const TraceRecord& rec : trace.records)
        if ((rows == 0 || int64_t(rec.n_rows) == rows) && int64_t(rec.pass) != last_pass) {
            ++r.passes;
            last_pass = int64_t(rec.pass);
        }
    SLUICE_CHECK(r.accesses > 0, "the trace has no pass of ", rows, " rows to replay");
    r.hit_rate = double(hits) / double(r.accesses);
    return r;
}

}  // namespace sluice
