// Read bandwidth of the DirectReader backends and of mmap faults on a file named by SLUICE_BENCH_IO_FILE (a few
// GB on the drive that will hold experts), for 1 MiB and K3-expert extents at queue depths 1-64. The same probe
// backs `sluice bench-io`, which prints a median-of-3 table; this form suits --benchmark_format=json runs.
#include <benchmark/benchmark.h>

#include <cstdlib>

#include "io/read_probe.h"

namespace {

void bm_read(benchmark::State& state, sluice::io::ProbeMethod method) {
    const char* file = std::getenv("SLUICE_BENCH_IO_FILE");
    if (file == nullptr) {
        state.SkipWithError("set SLUICE_BENCH_IO_FILE to a file of a few GB on the expert drive");
        return;
    }
    sluice::io::ReadProbeOptions o;
    o.files = {file};
    o.extent_bytes = uint64_t(state.range(0));
    o.queue_depth = unsigned(state.range(1));
    o.duration_s = 2.0;
    o.method = method;
    double gbps = 0, p99 = 0;
    for (auto _ : state) {
        auto r = sluice::io::measure_read_gbps(o);
        state.SetIterationTime(r.seconds);
        state.counters["bytes"] = double(r.bytes);
        gbps = r.gbps;
        p99 = r.p99_ms;
    }
    state.counters["GB/s"] = gbps;
    state.counters["p99_ms"] = p99;
}

void args(benchmark::internal::Benchmark* b) {
    for (int64_t extent : {int64_t(1) << 20, int64_t(17'547'264)})
        for (int64_t qd : {1, 4, 16, 64}) b->Args({extent, qd});
    b->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);
}

BENCHMARK_CAPTURE(bm_read, uring, sluice::io::ProbeMethod::Uring)->Apply(args);
BENCHMARK_CAPTURE(bm_read, pread, sluice::io::ProbeMethod::Pread)->Apply(args);
BENCHMARK_CAPTURE(bm_read, buffered, sluice::io::ProbeMethod::Buffered)->Apply(args);
BENCHMARK_CAPTURE(bm_read, mmap, sluice::io::ProbeMethod::Mmap)->Apply(args);

}  // namespace

BENCHMARK_MAIN();
