// The prefix cache's content-addressed index: block hashes chained over token ids (as vLLM and SGLang key their
// prefix caches). Block i's key is xxh3 of block i-1's key and tokens [i*B, (i+1)*B), so one key names a whole
// prefix. Every entry (a cached state, by id) is registered under the keys of its full blocks and under its first
// token; a key's list of entries is its reference count, and a key no entry holds any more is dropped.
//
// A lookup hashes the prompt block by block while the keys are known, so it finds the entries that share the most
// whole blocks with it at once, then those that share fewer, deepest first, and the caller stops as soon as no
// shallower entry can give more. Keys only choose which entries to compare: the caller compares tokens, so a hash
// collision can cost a comparison, never a wrong reuse.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <vector>

namespace sluice {

class PrefixIndex {
public:
    using Id = uint64_t;
    static constexpr int64_t k_block_tokens = 16;

    // The chained keys of the first full blocks of tokens (all of them, or at most max_blocks).
    static std::vector<uint64_t> block_keys(std::span<const int32_t> tokens, int64_t max_blocks = INT64_MAX);

    void add(Id id, std::span<const int32_t> tokens);
    void remove(Id id, std::span<const int32_t> tokens);  // the same tokens it was added with

    // Calls visit(id, shared) for each entry that shares at least its first token with `tokens`, each once, deepest
    // first: `shared` is the number of tokens of the whole blocks it shares (it shares fewer than shared + B).
    // visit returns false to stop.
    void visit(std::span<const int32_t> tokens, const std::function<bool(Id, int64_t shared)>& visit) const;

    size_t keys() const { return by_key_.size() + by_first_.size(); }

private:
    std::unordered_map<uint64_t, std::vector<Id>> by_key_;   // block key -> the entries holding that prefix
    std::unordered_map<int32_t, std::vector<Id>> by_first_;  // first token -> entries
};

}  // namespace sluice
