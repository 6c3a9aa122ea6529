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

std::pair<PrefixIndex::Id, int64_t> PrefixCache::best(std::span<const int32_t> prompt, int64_t max_tokens) const {
    std::pair<Id, int64_t> found{0, 0};
    uint64_t found_use = 0;
    index_.visit(prompt, [&](Id id, int64_t shared) {
        // entries found from here on share fewer than shared + B tokens: none can give more than found
        if (found.second >= shared + PrefixIndex::k_block_tokens) return false;
        const Entry& e = entries_.at(id);
        const int64_t n = reusable(*e.state, prompt, max_tokens);
        if (n > found.second || (n == found.second && n > 0 && e.last_use > found_use)) {
            found = {id, n};
            found_use = e.last_use;
        }
        return true;
    });
    return found;
}

int64_t PrefixCache::longest(std::span<const int32_t> prompt, int64_t max_tokens) const {
    const int64_t ram = best(prompt, max_tokens).second;
    return disk_ ? std::max(ram, disk_->best(prompt, max_tokens).tokens) : ram;
}

std::unique_ptr<SequenceState> PrefixCache::lookup(std::span<const int32_t> prompt, int64_t max_tokens) {
    ++stats_.lookups;
    const auto [best_id, best_n] = best(prompt, max_tokens);
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
    if (best_n == 0) return nullptr;
    touch(best_id);
    auto s = entries_.at(best_id).state->fork();
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
    if (s->size_bytes() > capacity_) return;  // its pages alone are more than the capacity
    // an entry the new one covers (same tokens, or a prefix the new one can serve as well) goes
    std::vector<Id> covered;
    index_.visit(s->tokens(), [&](Id id, int64_t) {
        const SequenceState& e = *entries_.at(id).state;
        if (covers(s->tokens(), s->snapshot_position(), e.tokens(), e.snapshot_position(), s->layout().has_recurrent()))
            covered.push_back(id);
        return true;
    });
    for (Id id : covered) {
        remove(id);
        ++stats_.evicted;
    }
    const Id id = next_id_++;
    add(id, {std::move(s), 0});
    ++stats_.inserted;
    evict_to(capacity_, id);
    stats_.bytes = bytes_;
    stats_.entries = int64_t(entries_.size());
}

void PrefixCache::add(Id id, Entry e) {
    const SequenceState& s = *e.state;
    bytes_ += s.unpaged_bytes();
    s.each_page([&](const void* page, uint64_t bytes) {
        if (page_refs_[page]++ == 0) bytes_ += bytes;
    });
    index_.add(id, s.tokens());
    entries_.emplace(id, std::move(e));
    touch(id);
}

void PrefixCache::remove(Id id) {
    auto it = entries_.find(id);
    if (it == entries_.end()) return;
    const SequenceState& s = *it->second.state;
    bytes_ -= s.unpaged_bytes();
    s.each_page([&](const void* page, uint64_t bytes) {
        auto r = page_refs_.find(page);
        if (--r->second == 0) {
            page_refs_.erase(r);
            bytes_ -= bytes;
        }
    });
    index_.remove(id, s.tokens());
    lru_.erase(it->second.last_use);
    entries_.erase(it);
}

void PrefixCache::touch(Id id) {
    Entry& e = entries_.at(id);
    lru_.erase(e.last_use);
    e.last_use = ++clock_;
    lru_.emplace(e.last_use, id);
}

void PrefixCache::evict_to(uint64_t limit, Id keep) {
    for (auto it = lru_.begin(); bytes_ > limit && it != lru_.end();) {
        const Id id = it->second;
        ++it;
        if (id == keep) continue;
        remove(id);
        ++stats_.evicted;
    }
    stats_.bytes = bytes_;
    stats_.entries = int64_t(entries_.size());
}

}  // namespace sluice
