// The SSD tier of the prefix cache (--state-dir DIR, --state-dir-size SIZE): every state the RAM tier keeps is also
// written to DIR as a state file (state/state_file.h: versioned, checksummed, tied to the model's fingerprint), so
// prefixes outlive the RAM tier's evictions and restarts. Files are evicted least-recently-used (by file time) to
// stay within the size. Opening scans DIR's *.sluicest files (header and token ids only); a file that is corrupt,
// cut short, from another model or an older version is skipped with a warning, and one that fails its checksum when
// loaded is deleted (ours, damaged) and recomputed: never an error for the request. A directory that cannot be
// created or written turns the tier off with one message; a full disk evicts, and if writing still fails the state
// is simply not kept.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/prefix_index.h"
#include "state/state_file.h"

namespace sluice {

struct StateDirStats {
    int64_t entries = 0, hits = 0, writes = 0, write_failures = 0, skipped_files = 0, evicted = 0;
    uint64_t bytes = 0;
};

// How many of prompt's first tokens a state of `tokens` can give (at most max_tokens): per-token caches serve any
// shared prefix; recurrent state only its whole length, or a prefix ending at or after its snapshot.
int64_t reusable_prefix(std::span<const int32_t> tokens, bool recurrent, int64_t snapshot_position,
                        std::span<const int32_t> prompt, int64_t max_tokens);
// Whether a state (tokens, snapshot) serves every prefix another one serves, so that one can go: its tokens are a
// head of these, and for recurrent state its lowest reusable length (its snapshot, else its whole length) is not
// below this one's.
bool covers(std::span<const int32_t> tokens, int64_t snapshot_position, std::span<const int32_t> other,
            int64_t other_snapshot_position, bool recurrent);

class StateDir {
public:
    StateDir(std::string dir, uint64_t capacity_bytes, StateFileModel model, bool recurrent);

    bool enabled() const { return enabled_; }
    const std::string& disabled_reason() const { return why_; }

    struct Match {
        int64_t tokens = 0;  // 0: none
        uint64_t entry = 0;
    };
    Match best(std::span<const int32_t> prompt, int64_t max_tokens) const;
    // Loads the match into `fresh` (a new, empty state of this model); false when the file turned out bad (it is
    // dropped from the index and deleted, with a warning).
    bool load(const Match& m, SequenceState& fresh);
    // Writes the state (replacing files whose prefixes it serves as well); never throws.
    void store(const SequenceState& s);

    const StateDirStats& stats() const { return stats_; }
    const std::string& dir() const { return dir_; }

private:
    struct Entry {
        std::string path;
        std::vector<int32_t> tokens;
        int64_t snapshot_position = -1;
        uint64_t bytes = 0, last_use = 0;
    };
    void evict_to(uint64_t limit);
    void add(Entry e);
    void remove(uint64_t id);
    void touch(Entry& e, uint64_t id);
    std::string path_for(std::span<const int32_t> tokens) const;

    std::string dir_;
    uint64_t capacity_;
    StateFileModel model_;
    bool recurrent_;
    bool enabled_ = false;
    std::string why_;
    uint64_t clock_ = 0, next_id_ = 1;
    std::unordered_map<uint64_t, Entry> entries_;  // by id
    std::map<uint64_t, uint64_t> lru_;             // last use -> id
    PrefixIndex index_;                            // the files' tokens (runtime/prefix_index.h)
    StateDirStats stats_;
};

}  // namespace sluice
