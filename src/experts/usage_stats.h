// Persistent expert usage statistics (`--usage-stats FILE`): per (layer, expert) counts of the token rows routed to
// each expert, kept across runs so the most-used experts can be preloaded and pinned in the expert cache. The file
// is JSON and names the model it came from (a fingerprint); it is only advice: a file that does not parse, is out
// of range or belongs to another model is rejected with an Error, and callers then run unpinned.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "experts/expert_cache.h"

namespace sluice {

class Checkpoint;

struct ModelFingerprint {
    std::string architecture;       // config.json "architectures"[0] (or "model_type")
    int64_t n_layers = 0;           // layers of the expert layout (dense ones included)
    int64_t experts_per_layer = 0;  // routed experts of an MoE layer
    uint64_t expert_bytes = 0;      // one routed expert, all matrices and scales
    uint64_t config_hash = 0;       // xxh3-64 of config.json's bytes
    uint64_t weights_hash = 0;      // xxh3-64 over the weight files' names and sizes
    bool operator==(const ModelFingerprint&) const = default;
};

// The fingerprint of a checkpoint folder with the given expert layout shape.
ModelFingerprint model_fingerprint(const Checkpoint& ck, int64_t n_layers, int64_t experts_per_layer,
                                   uint64_t expert_bytes);
// Empty when equal, else what differs first ("layers 4 vs 6", "config.json hash ...").
std::string fingerprint_difference(const ModelFingerprint& file, const ModelFingerprint& model);

struct UsageStats {
    ModelFingerprint model;
    uint64_t runs = 0;                         // runs merged into the counts
    std::vector<std::vector<uint64_t>> counts; // [layer][expert] token rows; empty rows for dense layers
};

// Limits a file must respect (anything beyond is rejected as out of range).
inline constexpr uint64_t k_usage_max_file_bytes = uint64_t(64) << 20;
inline constexpr int64_t k_usage_max_layers = 4096, k_usage_max_experts = 65536;
inline constexpr uint64_t k_usage_max_count = uint64_t(1) << 53;

// Parses a file's text; throws Error naming `name` and the bad field. Checks every bound, including that each
// counts row has 0 or experts_per_layer entries and that counts has n_layers rows.
UsageStats parse_usage_stats(std::string_view text, const std::string& name);
std::string serialize_usage_stats(const UsageStats& s);
// Reads and parses the file (Error when unreadable, too large or malformed).
UsageStats read_usage_stats(const std::string& path);
// Writes to a temporary file beside `path`, flushes it, then renames it over `path` (Error on failure).
void write_usage_stats(const std::string& path, const UsageStats& s);

// old counts halved (so the file tracks recent use) plus this run's counts; `old` may be null. Shapes must match.
UsageStats merge_usage(const UsageStats* old, const ModelFingerprint& model,
                       const std::vector<std::vector<uint64_t>>& live);

// The experts worth pinning: count > 0, most used first (ties: lower layer, then lower expert), at most max_pins.
std::vector<ExpertKey> choose_pins(const UsageStats& s, size_t max_pins);

}  // namespace sluice
