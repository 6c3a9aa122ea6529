// `sluice bench-io`: raw read bandwidth of the expert files' drive, with no compute — io_uring O_DIRECT vs
// pread O_DIRECT vs buffered pread vs mmap page faults, at several queue depths and extent sizes; each cell is
// the median of --runs runs. Every run starts cold for the buffered and mmap methods (POSIX_FADV_DONTNEED).
#include <algorithm>
#include <cstdio>

#include "commands.h"
#include "common.h"
#include "core/error.h"
#include "io/read_probe.h"

namespace sluice::cli {

namespace {

struct BenchIoArgs {
    std::vector<std::string> files;
    std::vector<uint64_t> extent_bytes = {1u << 20, 17'547'264};
    std::vector<unsigned> queue_depths = {1, 4, 16, 64};
    std::vector<std::string> methods = {"uring", "pread", "buffered", "mmap"};
    double seconds = 3.0;
    uint64_t total_bytes = 0;
    int runs = 3;
    uint64_t chunk_bytes = 1u << 20;
};

void print_row(const std::string& method, uint64_t extent, unsigned qd, const std::vector<io::ReadProbeResult>& runs) {
    std::vector<io::ReadProbeResult> sorted = runs;
    std::sort(sorted.begin(), sorted.end(), [](auto& x, auto& y) { return x.gbps < y.gbps; });
    const io::ReadProbeResult& med = sorted[sorted.size() / 2];
    std::string each;
    for (auto& r : runs) each += cat(r.gbps, " ");
    std::printf("%-9s %12llu %4u %9.3f %9.2f %9.2f %9.2f  %s\n", method.c_str(),
                static_cast<unsigned long long>(extent), qd, med.gbps, med.p50_ms, med.p99_ms, med.max_ms,
                each.c_str());
    std::fflush(stdout);
}

// Runs of the different methods are interleaved (run 1 of each, then run 2 of each, ...) so that a drive or a
// machine that is busier for a while slows all methods alike rather than one of them.
void run_bench_io(const BenchIoArgs& a) {
    SLUICE_CHECK(a.runs >= 1, "bench-io: --runs must be >= 1");
    std::vector<io::ProbeMethod> methods;
    for (const std::string& m : a.methods) methods.push_back(io::parse_probe_method(m));
    std::printf("%-9s %12s %4s %9s %9s %9s %9s  %s\n", "method", "extent_B", "qd", "GB/s", "p50_ms", "p99_ms", "max_ms",
                "GB/s of each run (median shown)");
    for (uint64_t extent : a.extent_bytes) {
        for (unsigned qd : a.queue_depths) {
            std::vector<std::vector<io::ReadProbeResult>> runs(methods.size());
            for (int r = 0; r < a.runs; ++r) {
                for (size_t m = 0; m < methods.size(); ++m) {
                    io::ReadProbeOptions o{.files = a.files,
                                           .extent_bytes = extent,
                                           .queue_depth = qd,
                                           .duration_s = a.seconds,
                                           .total_bytes = a.total_bytes,
                                           .method = methods[m],
                                           .chunk_bytes = a.chunk_bytes,
                                           .seed = uint64_t(r + 1)};
                    runs[m].push_back(io::measure_read_gbps(o));
                }
            }
            for (size_t m = 0; m < methods.size(); ++m) print_row(runs[m][0].method, extent, qd, runs[m]);
        }
    }
}

}  // namespace

void register_bench_io(CLI::App& app) {
    auto args = std::make_shared<BenchIoArgs>();
    auto* sub = app.add_subcommand("bench-io", "raw SSD read bandwidth: io_uring/pread O_DIRECT vs buffered vs mmap");
    sub->add_option("--file", args->files, "file(s) to read (a few GB, on the drive that will hold experts)")
        ->required();
    sub->add_option("--extent-bytes", args->extent_bytes, "extent sizes (default 1 MiB and one K3 expert)")
        ->delimiter(',');
    sub->add_option("--qd", args->queue_depths, "queue depths (reads in flight; threads for mmap)")->delimiter(',');
    sub->add_option("--method", args->methods, "uring, pread, buffered, mmap")->delimiter(',');
    sub->add_option("--seconds", args->seconds, "duration of each run")->check(positive());
    sub->add_option("--total-bytes", args->total_bytes, "bytes per run instead of a duration");
    sub->add_option("--runs", args->runs, "runs per cell; the median is reported");
    sub->add_option("--chunk-bytes", args->chunk_bytes, "reader chunk size");
    sub->callback([args] { run_bench_io(*args); });
}

}  // namespace sluice::cli
