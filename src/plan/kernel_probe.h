// The kernel half of `sluice bench --save-rates`: GB/s of weight bytes that ops::matmul streams per weight format
// and input row count, on one matrix shape whose copies cycle through pool_bytes (so they come from memory, or from
// a last-level cache larger than the pool), plus the fixed cost of one call (a tiny matrix, one row). Medians of
// `repetitions` timings per point.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ops/weight.h"
#include "plan/rates.h"

namespace sluice {

struct KernelProbeOptions {
    int threads = 0;  // 0: all cores (as the engine's pool)
    int64_t matrix_rows = 1024, matrix_cols = 1024;
    std::vector<int64_t> row_counts = {1, 4, 16, 64, 256};
    uint64_t pool_bytes = uint64_t(64) << 20;
    double seconds_per_point = 0.15;
    int repetitions = 3;
    std::vector<std::string> formats;  // empty: every probed format
    // also these matrix shapes (a format name of probed_formats, rows, cols), kept as kernels["fmt@RxC"]
    struct Shape {
        std::string format;
        int64_t rows = 0, cols = 0;
    };
    std::vector<Shape> shapes;
};

// The rates file's key of a shape-specific kernel rate: "mxfp4@384x448".
std::string kernel_shape_key(const std::string& format, int64_t rows, int64_t cols);

const std::vector<std::pair<std::string, WeightFormat>>& probed_formats();  // every CPU format a checkpoint ships

// Fills device, threads, kernels and matmul_overhead_us (drive_gbps is the caller's). ops::matmul runs in a context
// on the process default backend (ops::backend(): the CLI's --device), which `device` names.
MachineRates measure_kernel_rates(const KernelProbeOptions& options);

// The f32 FMA peak of `threads` threads (0: all cores), GFLOP/s: ops::fma_probe on every thread of a pool, the
// median of three runs of about 50 ms. The compute side's physical limit, as the read probe is the I/O side's.
struct FmaPeak {
    double gflops = 0;
    int threads = 0;
};
FmaPeak measure_fma_peak(int threads);

}  // namespace sluice
