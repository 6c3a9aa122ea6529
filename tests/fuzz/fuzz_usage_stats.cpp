// Fuzzes the expert usage statistics parser (--usage-stats): any input is either rejected with an Error or
// accepted; an accepted file re-serializes to text that parses back to the same statistics.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "experts/usage_stats.h"
#include "fuzz_parse_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    auto parsed = sluice::fuzz::parse_or_reject(
        data, size, [](const std::string& t) { return sluice::parse_usage_stats(t, "fuzz"); });
    if (!parsed) return 0;
    sluice::UsageStats& s = *parsed;
    (void)sluice::choose_pins(s, 64);
    const sluice::UsageStats back = sluice::parse_usage_stats(sluice::serialize_usage_stats(s), "fuzz round trip");
    if (!(back.model == s.model) || back.counts != s.counts || back.runs != s.runs) std::abort();
    (void)sluice::merge_usage(&s, s.model, s.counts);
    return 0;
}
