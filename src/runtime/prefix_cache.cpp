#include "runtime/prefix_cache.h"

#include <algorithm>

namespace sluice {

PrefixCache::PrefixCache(uint64_t capacity_bytes, int64_t keep_journal_rows)
    : capacity_(capacity_bytes), keep_rows_(std::max<int64_t>(keep_journal_rows, 1)) {}

int64_t PrefixCache::reusable(const SequenceState& s, std::span<const int32_t> prompt, int64_t max_tokens) {
    const auto t = s.tokens();
    const size_t limit = std::min({t.size(), prompt.size(), size_t(std::max<int64_t>(max_tokens, 0))});
    const int64_t common = std::mismatch(t.begin(), t.begin() + std::ptrdiff_t(limit), prompt.begin()).first - t.begin();
    if (common == s.n_past() || !s.layout().has_recurrent()) return common;
    const int64_t snap = s.snapshot_position();
    return snap >= 0 && common >= snap ? common : 0;
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
