// libFuzzer target: what `sluice batch --merge` reads from a shard's status file (api/batch_shard
// parse_shard_status) and the --shard spec (parse_shard_spec). Invariants: only sluice::Error comes out; a parsed
// status has 0 <= index < count <= kMaxShards and counts >= 0; an accepted spec is digits and a slash and reads
// back the same from its canonical form.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "api/batch_shard.h"
#include "core/error.h"

namespace {
void check(bool ok) {
    if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace sluice;
    const std::string text(reinterpret_cast<const char*>(data), size);
    try {
        const api::ShardStatus s = api::parse_shard_status(text, "status.json");
        check(s.shard.index >= 0 && s.shard.index < s.shard.count && s.shard.count <= api::kMaxShards);
        check(s.total >= 0 && s.completed >= 0 && s.failed >= 0 && s.input_tokens >= 0 && s.output_tokens >= 0);
        check(s.errors_data.is_array());
    } catch (const Error&) {
    }
    if (size <= 32) {
        try {
            const api::ShardSpec s = api::parse_shard_spec(text);
            check(s.index >= 0 && s.index < s.count && s.count <= api::kMaxShards);
            check(text.find_first_not_of("0123456789/") == std::string::npos);
            const api::ShardSpec again = api::parse_shard_spec(std::to_string(s.index) + "/" + std::to_string(s.count));
            check(again.index == s.index && again.count == s.count);
            check(api::shard_of(text, s.count) < s.count);
        } catch (const Error&) {
        }
    }
    return 0;
}
