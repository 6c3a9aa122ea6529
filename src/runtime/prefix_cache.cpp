#include "runtime/prefix_cache.h"

#include <algorithm>

namespace sluice {

PrefixCache::PrefixCache(uint64_t capacity_bytes, int64_t keep_journal_rows)
    : capacity_(capacity_bytes), keep_rows_(std::max<int64_t>(keep_journal_rows, 1)) {}

PrefixCache::PrefixCache(uint64_t capacity_bytes, std::unique_ptr<StateDir> disk,
                         std::function<std::unique_ptr<SequenceState>()> fresh, int64_t keep_journal_rows)
    : PrefixCache(capacity_bytes, keep_journal_rows) {
    if (disk && disk->enabled()) {
        disk_ = std::move(disk);
        fresh_ = std::move(fresh);
    }
}

PrefixCache::~PrefixCache() = default;

PrefixCacheStats PrefixCache::stats() const {
    PrefixCacheStats s = stats_;
    if (disk_) s.disk = disk_->stats();
    return s;
}

int64_t PrefixCache::reusable(const SequenceState& s, std::span<const int32_t> prompt, int64_t max_tokens) {
    return reusable_prefix(s.tokens(), s.layout().has_recurrent(), s.snapshot_position(), prompt, max_tokens);
}

int64_t PrefixCache::longest(std::span<const int32_t> prompt, int64_t max_tokens) const {
    int64_t best = disk_ ? disk_->best(prompt, max_tokens).tokens : 0;
    for (const auto& e : entries_) best = std::max(best, reusable(*e.state, prompt, max_tokens));
    return best;
}

std::unique_ptr<SequenceState> PrefixCache::lookup(std::span<const int32_t> prompt, int64_t max_tokens) {
    ++stats_.lookups;
    Entry* best = nullptr;
    int64_t best_n = 0;
    for (auto& e : entries_) {
        const int64_t n = reusable(*e.state, prompt, max_tokens);
        if (n > best_n || (n == best_n && n > 0 && e.last_use > best->last_use)) {
            best = &e;
            best_n = n;
        }
    }
    if (disk_) {
        const StateDir::Match m = disk_->best(prompt, max_tokens);
        if (m.tokens > best_n) {
            auto loaded = fresh_();
            if (disk_->load(m, *loaded)) {
                auto s = loaded->fork();
                keep_in_ram(std::move(loaded));  // the next lookup finds it in RAM
                s->truncate(m.tokens);
                s->drop_snapshot();
                ++stats_.hits;
                ++stats_.disk_hits;
                stats_.reused_tokens += m.tokens;
                return s;
            }
        }
    }
    if (!best) return nullptr;
    best->last_use = ++clock_;
    auto s = best->state->fork();
    s->truncate(best_n);
    s->drop_snapshot();  // the request journals nothing until it needs a restore point of its own
    ++stats_.hits;
    stats_.reused_tokens += best_n;
    return s;
}

void PrefixCache::insert(std::unique_ptr<SequenceState> s) {
    if (!s || s->n_past() == 0) return;
    if (s->layout().has_recurrent()) {
        // keep at most keep_rows_ journaled rows: the prefixes ending in them stay reusable, at bounded memory
        const int64_t n = s->n_past();
        if (s->snapshot_position() >= 0 && n - s->snapshot_position() > keep_rows_) s->advance_snapshot(n - keep_rows_);
    } else {
        s->drop_snapshot();
    }
    if (disk_) disk_->store(*s);
    keep_in_ram(std::move(s));
}

void PrefixCache::keep_in_ram(std::unique_ptr<SequenceState> s) {
    const uint64_t bytes = s->size_bytes();
    if (bytes > capacity_) return;
    // an entry the new one covers (same tokens, or a prefix the new one can serve as well) goes
    const int64_t before = int64_t(entries_.size());
    std::erase_if(entries_, [&](const Entry& e) {
        const int64_t n = e.state->n_past();
        return n <= s->n_past() && reusable(*s, e.state->tokens(), n) == n;
    });
    for (int64_t i = int64_t(entries_.size()); i < before; ++i) ++stats_.evicted;
    evict_to(capacity_ - bytes);
    entries_.push_back({std::move(s), bytes, ++clock_});
    ++stats_.inserted;
    stats_.bytes = 0;
    for (const auto& e : entries_) stats_.bytes += e.bytes;
    stats_.entries = int64_t(entries_.size());
}

void PrefixCache::evict_to(uint64_t limit) {
    uint64_t total = 0;
    for (const auto& e : entries_) total += e.bytes;
    while (total > limit && !entries_.empty()) {
        auto oldest = std::min_element(entries_.begin(), entries_.end(),
                                       [](const Entry& a, const Entry& b) { return a.last_use < b.last_use; });
        total -= oldest->bytes;
        entries_.erase(oldest);
        ++stats_.evicted;
    }
    stats_.bytes = total;
    stats_.entries = int64_t(entries_.size());
}

}  // namespace sluice
