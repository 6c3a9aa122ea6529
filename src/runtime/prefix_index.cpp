#include "runtime/prefix_index.h"

#include <xxhash.h>

#include <algorithm>
#include <unordered_set>

namespace sluice {

namespace {
uint64_t chain(uint64_t prev, const int32_t* block) {
    return XXH3_64bits_withSeed(block, size_t(PrefixIndex::k_block_tokens) * sizeof(int32_t), prev);
}

template <class Map, class Key>
void drop(Map& m, const Key& k, PrefixIndex::Id id) {
    auto it = m.find(k);
    if (it == m.end()) return;
    auto& ids = it->second;
    if (auto pos = std::find(ids.begin(), ids.end(), id); pos != ids.end()) ids.erase(pos);
    if (ids.empty()) m.erase(it);
}
}  // namespace

std::vector<uint64_t> PrefixIndex::block_keys(std::span<const int32_t> tokens, int64_t max_blocks) {
    const int64_t n = std::min<int64_t>(int64_t(tokens.size()) / k_block_tokens, max_blocks);
    std::vector<uint64_t> keys(size_t(std::max<int64_t>(n, 0)));
    uint64_t k = 0;
    for (int64_t i = 0; i < n; ++i) keys[size_t(i)] = k = chain(k, tokens.data() + i * k_block_tokens);
    return keys;
}

void PrefixIndex::add(Id id, std::span<const int32_t> tokens) {
    if (tokens.empty()) return;
    by_first_[tokens[0]].push_back(id);
    for (uint64_t k : block_keys(tokens)) by_key_[k].push_back(id);
}

void PrefixIndex::remove(Id id, std::span<const int32_t> tokens) {
    if (tokens.empty()) return;
    drop(by_first_, tokens[0], id);
    for (uint64_t k : block_keys(tokens)) drop(by_key_, k, id);
}

void PrefixIndex::visit(std::span<const int32_t> tokens, const std::function<bool(Id, int64_t)>& fn) const {
    if (tokens.empty()) return;
    auto first = by_first_.find(tokens[0]);
    if (first == by_first_.end()) return;
    // the known blocks of tokens, as far as they go
    std::vector<const std::vector<Id>*> levels;
    uint64_t k = 0;
    for (int64_t i = 0; (i + 1) * k_block_tokens <= int64_t(tokens.size()); ++i) {
        k = chain(k, tokens.data() + i * k_block_tokens);
        auto it = by_key_.find(k);
        if (it == by_key_.end()) break;
        levels.push_back(&it->second);
    }
    std::unordered_set<Id> seen;
    for (size_t d = levels.size(); d-- > 0;)
        for (Id id : *levels[d])
            if (seen.insert(id).second && !fn(id, int64_t(d + 1) * k_block_tokens)) return;
    for (Id id : first->second)
        if (seen.insert(id).second && !fn(id, 0)) return;
}

}  // namespace sluice
