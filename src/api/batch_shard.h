// A batch job split over several machines (docs/batch-shards.md). `sluice batch --shard I/N` runs the input lines
// whose custom_id hashes to I: shard_of(id, N) = XXH3-64(id) mod N, the same on every machine and for every run.
// Each shard's status file records the spec and the input's fingerprint (input_xxh3); `sluice batch --merge`
// checks that the shards are the N shards of that one input, all completed, each answer in the shard its
// custom_id belongs to, and joins them into one output, error and status file in input order.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace sluice::api {

struct ShardSpec {
    int64_t index = 0, count = 1;  // 0 <= index < count; 0/1 is the whole input
    bool whole() const { return count == 1; }
};
inline constexpr int64_t kMaxShards = 100000;

// "I/N" in decimal digits; throws Error naming the spec and what is wrong (not I/N, N < 1 or > kMaxShards, I >= N).
ShardSpec parse_shard_spec(const std::string& text);
int64_t shard_of(const std::string& custom_id, int64_t count);

// What merge reads from a shard's status file (what run_batch writes).
struct ShardStatus {
    ShardSpec shard;
    std::string status;      // completed, in_progress, failed, cancelled
    std::string input_xxh3;  // 16 hex digits
    std::string endpoint;
    int64_t created_at = 0, total = 0, completed = 0, failed = 0;
    int64_t input_tokens = 0, output_tokens = 0;
    nlohmann::json errors_data = nlohmann::json::array();  // the status's errors.data entries
};
// Throws Error naming `path` and the field: not JSON, not an object, a missing or mistyped field, a shard spec out
// of range, a count below zero.
ShardStatus parse_shard_status(const std::string& text, const std::string& path);

struct MergeOptions {
    std::string input_path;               // the input every shard ran on
    std::vector<std::string> shard_outputs;  // each shard's OUTPUT; its .errors.jsonl and .status.json beside it
    std::string output_path, error_path, status_path;  // empty error/status: derived from output_path
};
struct MergeSummary {
    int64_t shards = 0, completed = 0, failed = 0;
};
// Throws Error for shards of another input or another count, missing or repeated shards, unfinished shards, an
// answer in the wrong shard, for an id the input lacks, or none for one it has.
MergeSummary merge_batch_shards(const MergeOptions& options);

}  // namespace sluice::api
