// Measured machine rates for `sluice plan`, as `sluice bench --save-rates FILE` writes them:
//
//   {"sluice_rates": 1, "device": "cpu", "threads": 2,
//    "drive_gbps": 1.9, "drive_latency_ms": 0.9, "drive": {"method": "uring"},
//    "kernels": {"bf16": {"rows": [1, 4, 16, 64, 256], "gbps": [9.1, 8.7, 6.0, 3.1, 1.0]}, ...},
//    "matmul_overhead_us": 6.5}
//
// drive_gbps: random reads of expert-sized extents at the engine's queue depth, no compute (bench's raw probe);
// drive_latency_ms: the median time of one such read alone (queue depth 1): what a layer waits for its first miss;
// kernels: GB/s of weight bytes (payload and scales) one matmul streams, per weight format and input row count;
// matmul_overhead_us: the fixed cost of one matmul call (dispatch to the thread pool), measured on a tiny matrix.
// Every figure must be finite and > 0; errors name the file and the field.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace sluice {

struct KernelRate {
    std::vector<int64_t> rows;  // increasing
    std::vector<double> gbps;   // same length
    // GB/s at `rows` input rows: interpolated in log(rows) between the measured points, the end points beyond.
    double at(double rows) const;
};

struct MachineRates {
    std::string device = "cpu";
    int64_t threads = 0;
    double drive_gbps = 0;          // one drive (the probed one)
    double drive_latency_ms = 0;    // one expert-sized read alone (0: unknown)
    std::string drive_method;       // read backend of the probe, for the report
    std::map<std::string, KernelRate> kernels;  // by weight format name: bf16, f32, f16, fp8, mxfp4, int4
    double matmul_overhead_us = 0;
};

MachineRates parse_rates(const std::string& text, const std::string& what);  // throws Error naming what and field
MachineRates load_rates(const std::string& path);
std::string rates_to_json(const MachineRates& r);  // the file form (parse_rates reads it back)

}  // namespace sluice
