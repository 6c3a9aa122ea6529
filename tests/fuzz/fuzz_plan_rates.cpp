// Fuzzes the rates file parser (`sluice plan --rates`, written by `sluice bench --save-rates`): any input is either
// rejected with an Error or accepted; an accepted file has only positive finite rates, writes back to text that
// parses to the same rates, and every kernel rate interpolates to a positive finite figure.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz_parse_util.h"
#include "plan/rates.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const auto parsed =
        sluice::fuzz::parse_or_reject(data, size, [](const std::string& t) { return sluice::parse_rates(t, "fuzz"); });
    if (!parsed) return 0;
    const sluice::MachineRates& r = *parsed;
    if (!(std::isfinite(r.drive_gbps) && r.drive_gbps > 0)) std::abort();
    for (const auto& [fmt, k] : r.kernels)
        for (double rows : {0.5, 1.0, 3.0, 100.0, 1e9}) {
            const double g = k.at(rows);
            if (!(std::isfinite(g) && g > 0)) std::abort();
        }
    const sluice::MachineRates back = sluice::parse_rates(sluice::rates_to_json(r), "fuzz round trip");
    if (back.drive_gbps != r.drive_gbps || back.kernels.size() != r.kernels.size() ||
        back.matmul_overhead_us != r.matmul_overhead_us || back.drive_latency_ms != r.drive_latency_ms)
        std::abort();
    for (const auto& [fmt, k] : r.kernels)
        if (back.kernels.at(fmt).rows != k.rows || back.kernels.at(fmt).gbps != k.gbps) std::abort();
    return 0;
}
