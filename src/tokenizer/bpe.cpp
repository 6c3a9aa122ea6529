// BPE merging (see bpe.h). Ties between equal ranks go to the leftmost pair, as in HF tokenizers and tiktoken.
#include "tokenizer/bpe.h"

#include <algorithm>
#include <queue>

#include "core/error.h"

namespace sluice::tok {

namespace {

constexpr size_t k_short_word = 48;     // linear-scan merging below this many bytes
constexpr size_t k_cache_max_len = 64;  // longer pieces are not cached
constexpr size_t k_cache_capacity = 1 << 16;

uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

constexpr uint32_t k_no_rank = UINT32_MAX;

}  // namespace

void BpeModel::add_token(std::string bytes, int32_t id) {
    vocab_.emplace(std::move(bytes), id);
}

void BpeModel::add_merge(int32_t left, int32_t right, int32_t merged, uint32_t rank) {
    pending_.push_back({pair_key(left, right), rank, merged});
}

void BpeModel::finalize(bool ignore_merges) {
    ignore_merges_ = ignore_merges;
    for (auto& b : byte_ids_) b = -1;
    for (const auto& [bytes, id] : vocab_)
        if (bytes.size() == 1) byte_ids_[static_cast<uint8_t>(bytes[0])] = id;
    size_t cap = 16;
    while (cap < pending_.size() * 2) cap <<= 1;
    slots_.assign(cap, MergeSlot{});
    mask_ = cap - 1;
    merge_count_ = 0;
    for (const auto& m : pending_) {
        for (uint64_t h = mix(m.key) & mask_;; h = (h + 1) & mask_) {
            if (slots_[h].key == ~0ull) {
                slots_[h] = m;
                ++merge_count_;
                break;
            }
            if (slots_[h].key == m.key) {  // a duplicate pair keeps its first (lowest) rank
                if (m.rank < slots_[h].rank) slots_[h] = m;
                break;
            }
        }
    }
    pending_.clear();
    pending_.shrink_to_fit();
}

const BpeModel::MergeSlot* BpeModel::lookup(int32_t left, int32_t right) const {
    const uint64_t key = pair_key(left, right);
    for (uint64_t h = mix(key) & mask_;; h = (h + 1) & mask_) {
        const MergeSlot& s = slots_[h];
        if (s.key == key) return &s;
        if (s.key == ~0ull) return nullptr;
    }
}

int32_t BpeModel::find(std::string_view bytes) const {
    auto it = vocab_.find(bytes);
    return it == vocab_.end() ? -1 : it->second;
}

void BpeModel::encode_word(std::string_view bytes, std::vector<int32_t>& out) const {
    if (bytes.empty()) return;
    if (bytes.size() == 1) {
        if (const int32_t id = byte_ids_[static_cast<uint8_t>(bytes[0])]; id >= 0) out.push_back(id);
        return;
    }
    if (ignore_merges_) {
        if (const int32_t id = find(bytes); id >= 0) {
            out.push_back(id);
            return;
        }
    }
    const bool cacheable = bytes.size() <= k_cache_max_len;
    std::string key;
    if (cacheable) {
        key.assign(bytes);
        std::lock_guard lock(cache_mutex_);
        if (auto it = cache_.find(key); it != cache_.end()) {
            out.insert(out.end(), it->second.begin(), it->second.end());
            return;
        }
    }
    const size_t first = out.size();
    if (bytes.size() < k_short_word) merge_short(bytes, out);
    else merge_long(bytes, out);
    if (cacheable) {
        std::lock_guard lock(cache_mutex_);
        if (cache_.size() < k_cache_capacity) cache_.emplace(std::move(key), std::vector<int32_t>(out.begin() + first, out.end()));
    }
}

void BpeModel::merge_short(std::string_view bytes, std::vector<int32_t>& out) const {
    int32_t ids[k_short_word];
    uint32_t ranks[k_short_word];  // ranks[i]: rank of merging ids[i] with ids[i + 1]
    int32_t merged[k_short_word];
    size_t n = 0;
    for (char c : bytes) {
        const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
        if (id >= 0) ids[n++] = id;  // a byte with no token is dropped, as HF does without an unk token
    }
    auto rank_at = [&](size_t i) {
        const MergeSlot* s = lookup(ids[i], ids[i + 1]);
        ranks[i] = s ? s->rank : k_no_rank;
        merged[i] = s ? s->merged : -1;
    };
    for (size_t i = 0; i + 1 < n; ++i) rank_at(i);
    while (n > 1) {
        size_t best = 0;
        uint32_t best_rank = k_no_rank;
        for (size_t i = 0; i + 1 < n; ++i) {
            if (ranks[i] < best_rank) {
                best_rank = ranks[i];
                best = i;
            }
        }
        if (best_rank == k_no_rank) break;
        ids[best] = merged[best];
        for (size_t i = best + 1; i + 1 < n; ++i) {
            ids[i] = ids[i + 1];
            ranks[i] = ranks[i + 1];
            merged[i] = merged[i + 1];
        }
        --n;
        if (best > 0) rank_at(best - 1);
        if (best + 1 < n) rank_at(best);
    }
    out.insert(out.end(), ids, ids + n);
}

void BpeModel::merge_long(std::string_view bytes, std::vector<int32_t>& out) const {
    struct Symbol {
        int32_t id;
        int32_t prev, next;
        bool alive;
    };
    std::vector<Symbol> sym;
    sym.reserve(bytes.size());
    for (char c : bytes) {
        const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
        if (id < 0) continue;
        const auto idx = static_cast<int32_t>(sym.size());
        sym.push_back({id, idx - 1, idx + 1, true});
    }
    if (sym.empty()) return;
    sym.back().next = -1;
    struct Cand {
        uint32_t rank;
        int32_t pos;  // index of the left symbol; symbols keep their order, so this orders by position
        int32_t left_id, right_id, merged;
        bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Cand, std::vector<Cand>, std::greater<>> heap;
    auto push = [&](int32_t i) {
        if (i < 0 || sym[i].next < 0) return;
        const Symbol& a = sym[i];
        const Symbol& b = sym[a.next];
        if (const MergeSlot* s = lookup(a.id, b.id)) heap.push({s->rank, i, a.id, b.id, s->merged});
    };
    for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) push(i);
    while (!heap.empty()) {
        const Cand c = heap.top();
        heap.pop();
        Symbol& a = sym[c.pos];
        if (!a.alive || a.id != c.left_id || a.next < 0) continue;
        Symbol& b = sym[a.next];
        if (b.id != c.right_id) continue;
        a.id = c.merged;
        b.alive = false;
        a.next = b.next;
        if (b.next >= 0) sym[b.next].prev = c.pos;
        push(a.prev);
        push(c.pos);
    }
    for (int32_t i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

}  // namespace sluice::tok
