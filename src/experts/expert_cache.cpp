#include "experts/expert_cache.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "core/error.h"
#include "core/huge_pages.h"
#include "core/stable_memory.h"

namespace sluice {

namespace {

class LruPolicy : public CachePolicy {
public:
    explicit LruPolicy(size_t n) : last_(n, 0) {}
    std::string name() const override { return "lru"; }
    void on_insert(size_t s, ExpertKey) override { last_[s] = ++clock_; }
    void on_hit(size_t s, ExpertKey) override { last_[s] = ++clock_; }
    void on_evict(size_t s) override { last_[s] = 0; }
    size_t victim(const std::vector<uint8_t>& ok) override {
        size_t best = SIZE_MAX;
        for (size_t s = 0; s < last_.size(); ++s)
            if (ok[s] && (best == SIZE_MAX || last_[s] < last_[best])) best = s;
        return best;
    }

private:
    std::vector<uint64_t> last_;
    uint64_t clock_ = 0;
};

class LfuPolicy : public CachePolicy {
public:
    explicit LfuPolicy(size_t n) : key_(n), last_(n, 0) {}
    std::string name() const override { return "lfu"; }
    void on_insert(size_t s, ExpertKey k) override {
        key_[s] = k.packed();
        touch(s);
    }
    void on_hit(size_t s, ExpertKey) override { touch(s); }
    void on_evict(size_t s) override { last_[s] = 0; }
    size_t victim(const std::vector<uint8_t>& ok) override {
        size_t best = SIZE_MAX;
        for (size_t s = 0; s < key_.size(); ++s) {
            if (!ok[s]) continue;
            if (best == SIZE_MAX) {
                best = s;
                continue;
            }
            const uint32_t fs = freq_[key_[s]], fb = freq_[key_[best]];
            if (fs < fb || (fs == fb && last_[s] < last_[best])) best = s;
        }
        return best;
    }

private:
    void touch(size_t s) {
        last_[s] = ++clock_;
        ++freq_[key_[s]];
        if (clock_ % (16 * key_.size() + 1024) == 0)  // aging: old popularity fades
            for (auto& [k, f] : freq_) f /= 2;
    }
    std::vector<uint64_t> key_, last_;
    std::unordered_map<uint64_t, uint32_t> freq_;
    uint64_t clock_ = 0;
};

class NextUsePolicy : public CachePolicy {
public:
    explicit NextUsePolicy(size_t n) : key_(n), last_(n, 0) {}
    std::string name() const override { return "next-use"; }
    // Use is counted from the fetches' lookups (on_hit, on_miss), which also say which layer runs; an insert is
    // either a miss already counted or a read-ahead for a coming layer, counted when its fetch asks for it.
    void on_insert(size_t s, ExpertKey k) override {
        key_[s] = k;
        last_[s] = ++clock_;
    }
    void on_hit(size_t s, ExpertKey) override { touch(s); }
    void on_evict(size_t s) override { last_[s] = 0; }
    void on_miss(ExpertKey k) override { note(k); }
    bool admit(ExpertKey k, size_t victim) override {
        // A read-ahead for a coming layer (a fetch's misses were noted by on_miss, which made their layer the
        // current one): the look-ahead's hint is itself the prediction that it is needed next, so it is admitted.
        // (With admission refused, StreamingExpertSource::prefetch would also stop trying the hint's other experts.)
        if (k.layer != current_layer_) return true;
        return expected_next_use(k) <= expected_next_use(key_[victim]);
    }
    size_t victim(const std::vector<uint8_t>& ok) override {
        size_t best = SIZE_MAX;
        double best_visits = -1;
        for (size_t s = 0; s < key_.size(); ++s) {
            if (!ok[s]) continue;
            const double expected = expected_next_use(key_[s]);
            if (best == SIZE_MAX || expected > best_visits || (expected == best_visits && last_[s] < last_[best])) {
                best = s;
                best_visits = expected;
            }
        }
        return best;
    }

protected:
    static constexpr double k_weight = 0.1;
    struct Use {
        double average = 0;  // moving-average count of the visits that chose the expert, as of visit `visit`
        uint64_t visit = 0;
    };
    // Layer visits until k is next used, expected: d + L (1 - p) / p.
    double expected_next_use(ExpertKey k) {
        const Use& u = use_[k.packed()];
        const double p =
            std::clamp(k_weight * u.average * std::pow(1.0 - k_weight, double(visits(k.layer) - u.visit)), 1e-4, 1.0);
        const int64_t n = std::max<int64_t>(1, int64_t(layers_.size()));
        int64_t d = ((position(k.layer) - position(current_layer_)) % n + n) % n;
        if (d == 0) d = n;  // the layer being run: its unpinned experts wait a whole cycle
        return expected_from(k, double(d), double(n), p);
    }
    virtual double expected_from(ExpertKey, double d, double n, double p) { return d + n * (1.0 - p) / p; }
    virtual void new_visit(int32_t /*layer*/) {}  // note() starts a visit of `layer` (before counting its first use)
    virtual void noted(ExpertKey /*k*/) {}        // note() counted k's use in the current visit of its layer
    void touch(size_t s) {
        last_[s] = ++clock_;
        note(key_[s]);
    }
    void note(ExpertKey k) {
        if (k.layer != current_layer_ || visit_.empty()) {  // a new visit to k's layer
            current_layer_ = k.layer;
            new_visit(k.layer);
            if (std::find(layers_.begin(), layers_.end(), k.layer) == layers_.end()) {
                layers_.insert(std::upper_bound(layers_.begin(), layers_.end(), k.layer), k.layer);
            }
            ++visit_[k.layer];
        }
        const uint64_t v = visits(k.layer);
        Use& u = use_[k.packed()];
        if (u.visit != v || u.average == 0) {  // counted once per visit
            u.average = u.average * std::pow(1.0 - k_weight, double(v - u.visit)) + 1.0;
            u.visit = v;
        }
        noted(k);
    }
    uint64_t visits(int32_t layer) const {
        auto it = visit_.find(layer);
        return it == visit_.end() ? 0 : it->second;
    }
    int64_t position(int32_t layer) const {
        return std::lower_bound(layers_.begin(), layers_.end(), layer) - layers_.begin();
    }
    std::vector<ExpertKey> key_;
    std::vector<uint64_t> last_;
    std::vector<int32_t> layers_;  // MoE layers seen, ascending
    std::unordered_map<int32_t, uint64_t> visit_;
    std::unordered_map<uint64_t, Use> use_;
    int32_t current_layer_ = -1;
    uint64_t clock_ = 0;
};

// next-use whose chance that the next visit of an expert's layer chooses it comes from that layer's transitions
// (expert_cache.h). Counts: follows[f] = visits that chose f and were followed by another visit of its layer,
// after[f][e] = of those, the ones whose next visit chose e (dense per layer, 16-bit, grown to the largest expert id
// seen rounded up to 64; when follows[f] reaches 65535, f's counts are halved, which also ages them).
// For a victim search over many slots the sums over the latest visit are kept per layer (sum_after[e], sum_inverse)
// and redone only when the latest visit or the counts change: each term is added in ascending f, the order
// tools/routing/cache_replay.py sums in, so that the replay and the engine pick the same victims to the bit.
class MarkovPolicy : public NextUsePolicy {
public:
    using NextUsePolicy::NextUsePolicy;
    std::string name() const override { return "markov"; }

private:
    static constexpr double k_prior = 2.0;  // pseudo-visits that pull q towards next-use's p while counts are few
    struct Layer {
        std::vector<int32_t> before, latest;  // experts chosen by the previous and the latest visit, ascending
        size_t dim = 0;                       // after is dim x dim
        std::vector<uint16_t> after, follows;
        bool stale = true;                    // sum_after / sum_inverse need redoing
        std::vector<double> sum_after;        // [dim]: sum over f in latest of after[f][e] / (follows[f] + prior)
        double sum_inverse = 0;               // sum over f in latest of 1 / (follows[f] + prior)
    };
    void new_visit(int32_t layer) override {
        auto it = layers_state_.find(layer);
        if (it == layers_state_.end()) {
            layers_state_[layer];
            return;
        }
        Layer& l = it->second;
        for (int32_t f : l.before) {
            ++l.follows[size_t(f)];
            uint16_t* row = l.after.data() + size_t(f) * l.dim;
            for (int32_t e : l.latest) ++row[e];  // after[f][e] <= follows[f]: no overflow
            if (l.follows[size_t(f)] == 65535) {
                l.follows[size_t(f)] /= 2;
                for (size_t e = 0; e < l.dim; ++e) row[e] /= 2;
            }
        }
        l.before = std::move(l.latest);
        l.latest.clear();
        l.stale = true;
    }
    void noted(ExpertKey k) override {
        Layer& l = layers_state_[k.layer];
        auto at = std::lower_bound(l.latest.begin(), l.latest.end(), k.expert);
        if (at != l.latest.end() && *at == k.expert) return;
        l.latest.insert(at, k.expert);
        if (size_t(k.expert) >= l.dim) grow(l, size_t(k.expert) + 1);
        l.stale = true;
    }
    static void grow(Layer& l, size_t dim) {
        dim = (dim + 63) / 64 * 64;
        std::vector<uint16_t> after(dim * dim, 0);
        for (size_t f = 0; f < l.dim; ++f)
            std::copy_n(l.after.begin() + ptrdiff_t(f * l.dim), l.dim, after.begin() + ptrdiff_t(f * dim));
        l.after = std::move(after);
        l.follows.resize(dim, 0);
        l.dim = dim;
    }
    static void refresh(Layer& l) {
        l.sum_after.assign(l.dim, 0.0);
        l.sum_inverse = 0;
        for (int32_t f : l.latest) {
            const double m = double(l.follows[size_t(f)]) + k_prior;
            const uint16_t* row = l.after.data() + size_t(f) * l.dim;
            for (size_t e = 0; e < l.dim; ++e) l.sum_after[e] += double(row[e]) / m;
            l.sum_inverse += 1.0 / m;
        }
        l.stale = false;
    }
    double expected_from(ExpertKey k, double d, double n, double p) override {
        auto it = layers_state_.find(k.layer);
        double q = p;
        if (it != layers_state_.end() && !it->second.latest.empty()) {
            Layer& l = it->second;
            if (l.stale) refresh(l);
            const size_t e = size_t(k.expert);
            const double a = e < l.dim ? l.sum_after[e] : 0.0;
            q = (a + k_prior * p * l.sum_inverse) / double(l.latest.size());
        }
        return d + (1.0 - q) * n / p;
    }
    std::unordered_map<int32_t, Layer> layers_state_;
};

}  // namespace

std::unique_ptr<CachePolicy> make_next_use_policy(size_t n) { return std::make_unique<NextUsePolicy>(n); }
std::unique_ptr<CachePolicy> make_markov_policy(size_t n) { return std::make_unique<MarkovPolicy>(n); }

uint64_t cache_policy_bytes(const std::string& name, int64_t moe_layers, int64_t experts) {
    if (name != "markov" || moe_layers <= 0 || experts <= 0) return 0;
    const uint64_t dim = (uint64_t(experts) + 63) / 64 * 64;
    // after (16-bit dim x dim), follows (16-bit), sum_after (double), the visits' expert lists (32-bit, at most dim
    // each, two of them), and a node of the layer map
    return uint64_t(moe_layers) * (dim * dim * 2 + dim * 2 + dim * 8 + 2 * dim * 4 + 256);
}
std::unique_ptr<CachePolicy> make_lru_policy(size_t n) { return std::make_unique<LruPolicy>(n); }
std::unique_ptr<CachePolicy> make_lfu_policy(size_t n) { return std::make_unique<LfuPolicy>(n); }
std::unique_ptr<CachePolicy> make_cache_policy(const std::string& name, size_t n) {
    if (name == "lru") return make_lru_policy(n);
    if (name == "lfu") return make_lfu_policy(n);
    if (name == "next-use") return make_next_use_policy(n);
    if (name == "markov") return make_markov_policy(n);
    fail("unknown expert cache policy '", name, "' (lru, lfu, next-use, markov)");
}

ExpertCache::ExpertCache(uint64_t budget_bytes, uint64_t slot_bytes, int64_t n_layers,
                         std::unique_ptr<CachePolicy> policy)
    : slot_bytes_((slot_bytes + 4095) / 4096 * 4096), stats_(static_cast<size_t>(n_layers)) {
    SLUICE_CHECK(slot_bytes > 0, "expert cache: slot size must be > 0");
    n_slots_ = size_t(budget_bytes / slot_bytes_);
    policy_ = policy ? std::move(policy) : make_lru_policy(n_slots_);
    if (n_slots_ > 0) {
        // Huge pages: the first read into each slot faults its memory in, and 4 KiB faults of a multi-GiB cache cost
        // seconds of kernel time during a cold decode; and reads from DRAM get faster (bench_kernels, 2 threads: the
        // read probe 31 -> 33-34 GB/s, one-row MXFP4 20 -> 21-22, BF16 24.5 -> 25-26; INT4 unchanged).
        const size_t bytes = n_slots_ * slot_bytes_;
        memory_ = alloc_huge_advised(bytes);
        SLUICE_CHECK(memory_, "expert cache: cannot allocate ", bytes, " bytes");
        pinned_ = ops::PinnedRegion(memory_, bytes);
        populate_ = std::make_unique<BackgroundPopulate>(memory_, bytes);  // free slots are used in address order
        content_space_ = stable_memory::new_space();
    }
    key_of_.resize(n_slots_);
    used_.assign(n_slots_, 0);
    pins_.assign(n_slots_, 0);
    held_.assign(n_slots_, 0);
}

ExpertCache::~ExpertCache() {
    populate_.reset();  // joined before the memory goes
    for (size_t s = 0; s < n_slots_; ++s)
        if (used_[s]) stable_memory::remove_at(memory_ + s * slot_bytes_);
    pinned_.reset();
    std::free(memory_);
}

uint8_t* ExpertCache::acquire(ExpertKey key) {
    auto& st = stats_.at(size_t(key.layer));
    auto it = where_.find(key.packed());
    if (it == where_.end()) {
        ++st.misses;
        policy_->on_miss(key);
        return nullptr;
    }
    ++st.hits;
    if (held_[it->second]) ++st.held_hits;
    ++pins_[it->second];
    policy_->on_hit(it->second, key);
    return memory_ + it->second * slot_bytes_;
}

uint8_t* ExpertCache::insert(ExpertKey key) {
    SLUICE_ASSERT(!contains(key), "expert ", key.layer, "/", key.expert, " already cached");
    if (n_slots_ == 0) return nullptr;
    size_t slot = SIZE_MAX;
    for (size_t s = 0; s < n_slots_ && slot == SIZE_MAX; ++s)
        if (!used_[s]) slot = s;
    if (slot == SIZE_MAX) {
        std::vector<uint8_t> evictable(n_slots_);
        bool any = false;
        for (size_t s = 0; s < n_slots_; ++s) {
            evictable[s] = pins_[s] == 0 && !held_[s];
            any |= evictable[s] != 0;
        }
        if (!any) return nullptr;
        slot = policy_->victim(evictable);
        SLUICE_ASSERT(slot < n_slots_ && evictable[slot], "policy chose a pinned slot");
        if (!policy_->admit(key, slot)) return nullptr;
        ++stats_.at(size_t(key_of_[slot].layer)).evictions;
        where_.erase(key_of_[slot].packed());
        policy_->on_evict(slot);
    }
    used_[slot] = 1;
    pins_[slot] = 1;
    key_of_[slot] = key;
    where_[key.packed()] = slot;
    policy_->on_insert(slot, key);
    // The slot is about to hold key's bytes (no op reads it before they have landed): a device copy of any of its
    // matrices is key's and stays valid wherever key is read to later (core/stable_memory.h).
    stable_memory::set_at(memory_ + slot * slot_bytes_, slot_bytes_,
                          stable_memory::content_id(content_space_, uint32_t(key.layer), uint32_t(key.expert)));
    return memory_ + slot * slot_bytes_;
}

bool ExpertCache::pin(ExpertKey key) {
    auto it = where_.find(key.packed());
    if (it == where_.end()) return false;
    ++pins_[it->second];
    return true;
}

void ExpertCache::unpin(ExpertKey key) {
    auto it = where_.find(key.packed());
    SLUICE_ASSERT(it != where_.end() && pins_[it->second] > 0, "unpin of an expert that is not pinned");
    --pins_[it->second];
}

void ExpertCache::drop(ExpertKey key) {
    auto it = where_.find(key.packed());
    if (it == where_.end()) return;
    const size_t slot = it->second;
    where_.erase(it);
    stable_memory::remove_at(memory_ + slot * slot_bytes_);
    used_[slot] = 0;
    pins_[slot] = 0;
    if (held_[slot]) --n_held_;
    held_[slot] = 0;
    policy_->on_evict(slot);
}

bool ExpertCache::hold(ExpertKey key) {
    auto it = where_.find(key.packed());
    if (it == where_.end()) return false;
    if (!held_[it->second]) ++n_held_;
    held_[it->second] = 1;
    return true;
}

void ExpertCache::release(ExpertKey key) {
    auto it = where_.find(key.packed());
    if (it == where_.end() || !held_[it->second]) return;
    held_[it->second] = 0;
    --n_held_;
}

bool ExpertCache::held(ExpertKey key) const {
    auto it = where_.find(key.packed());
    return it != where_.end() && held_[it->second];
}

std::vector<std::pair<ExpertKey, bool>> ExpertCache::residents(int32_t layer) const {
    std::vector<std::pair<ExpertKey, bool>> out;
    for (size_t s = 0; s < n_slots_; ++s)
        if (used_[s] && key_of_[s].layer == layer) out.emplace_back(key_of_[s], held_[s] != 0);
    return out;
}

LayerCacheStats ExpertCache::total_stats() const {
    LayerCacheStats t;
    for (const auto& s : stats_) {
        t.hits += s.hits;
        t.misses += s.misses;
        t.evictions += s.evictions;
        t.held_hits += s.held_hits;
    }
    return t;
}

}  // namespace sluice
