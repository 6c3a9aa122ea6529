// Automatic prefix reuse: states of finished prompts (and finished requests) kept in RAM, so a request whose prompt
// starts with tokens some earlier request already ran continues from a copy of that state and computes only the
// rest — a new chat turn computes only its new tokens, batch lines that share instructions prefill them once.
//
// Reuse is exact: a state holds the caches of exactly its tokens, so continuing it gives the bits a full prefill
// gives (the forward pass is bit-identical however a prompt is chunked). Per-token caches can be cut back to any
// shared prefix. Recurrent (KDA) state cannot: an entry keeps a snapshot and a journal of its last rows
// (keep_journal_rows; state/sequence_state.h), so it serves prefixes that end in those rows or at its end.
//
// Entries are found through a content-addressed index (runtime/prefix_index.h: block hashes chained over token
// ids), so a lookup compares tokens only with the entries that share the most whole blocks with the prompt. They are
// evicted least-recently-used by bytes, and the bytes count each page of the per-token caches once however many
// entries share it (entries of one conversation share their history's pages). With a state directory
// (runtime/state_dir.h) every kept state is also written there, and a lookup that the directory serves with more
// tokens than RAM loads the file (and keeps it in RAM too).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "runtime/prefix_index.h"
#include "runtime/state_dir.h"
#include "state/sequence_state.h"

namespace sluice {

struct PrefixCacheStats {
    int64_t lookups = 0, hits = 0, reused_tokens = 0, inserted = 0, evicted = 0;
    uint64_t bytes = 0;  // what the entries hold, each shared page once
    int64_t entries = 0;
    int64_t disk_hits = 0;  // hits served from the state directory
    StateDirStats disk;     // the state directory's own counts (all zero without one)
};

class PrefixCache {
public:
    explicit PrefixCache(uint64_t capacity_bytes, int64_t keep_journal_rows = 16);
    // With an SSD tier: `fresh` makes the empty states files are loaded into.
    PrefixCache(uint64_t capacity_bytes, std::unique_ptr<StateDir> disk,
                std::function<std::unique_ptr<SequenceState>()> fresh, int64_t keep_journal_rows = 16);
    ~PrefixCache();

    // Keeps `state` (its tokens are the key), replacing entries it makes redundant. A state larger than the whole
    // capacity is dropped.
    void insert(std::unique_ptr<SequenceState> state);
    // How many tokens lookup() would give (RAM and the state directory), without copying anything.
    int64_t longest(std::span<const int32_t> prompt, int64_t max_tokens) const;
    // A fresh state holding the longest reusable prefix of `prompt` of at most max_tokens tokens, or null.
    std::unique_ptr<SequenceState> lookup(std::span<const int32_t> prompt, int64_t max_tokens);

    PrefixCacheStats stats() const;
    const StateDir* disk() const { return disk_.get(); }
    uint64_t capacity_bytes() const { return capacity_; }

private:
    struct Entry {
        std::unique_ptr<SequenceState> state;
        uint64_t last_use = 0;
    };
    using Id = PrefixIndex::Id;
    // How many of prompt's first tokens the entry can give (0: none).
    static int64_t reusable(const SequenceState& s, std::span<const int32_t> prompt, int64_t max_tokens);
    // The entry giving the most of prompt (the most recently used of equals), and how many tokens; {0, 0}: none.
    std::pair<Id, int64_t> best(std::span<const int32_t> prompt, int64_t max_tokens) const;
    void evict_to(uint64_t bytes, Id keep);
    void keep_in_ram(std::unique_ptr<SequenceState> s);
    void add(Id id, Entry e);
    void remove(Id id);
    void touch(Id id);
    uint64_t capacity_;
    int64_t keep_rows_;
    uint64_t clock_ = 0;
    Id next_id_ = 1;
    std::unordered_map<Id, Entry> entries_;
    std::map<uint64_t, Id> lru_;  // last_use -> entry
    PrefixIndex index_;
    std::unordered_map<const void*, uint32_t> page_refs_;  // page -> entries holding it
    uint64_t bytes_ = 0;
    PrefixCacheStats stats_;
    std::unique_ptr<StateDir> disk_;
    std::function<std::unique_ptr<SequenceState>()> fresh_;
};

}  // namespace sluice
