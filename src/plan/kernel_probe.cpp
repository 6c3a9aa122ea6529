#include "plan/kernel_probe.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/exec_context.h"
#include "ops/ops.h"
#include "ops/quantize.h"

namespace sluice {

namespace {
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Median of `reps` timings of `fn` (each timing runs it until min_seconds pass), seconds per call.
template <class F>
double median_call_seconds(F&& fn, int reps, double min_seconds) {
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
        int64_t calls = 0;
        const auto t0 = Clock::now();
        do {
            fn(calls++);
        } while (seconds_since(t0) < min_seconds);
        t.push_back(seconds_since(t0) / double(calls));
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}
}  // namespace

const std::vector<std::pair<std::string, WeightFormat>>& probed_formats() {
    static const std::vector<std::pair<std::string, WeightFormat>> f = {
        {"f32", WeightFormat::F32},   {"bf16", WeightFormat::BF16},         {"f16", WeightFormat::F16},
        {"fp8", WeightFormat::FP8_E4M3_B128}, {"mxfp4", WeightFormat::MXFP4}, {"int4", WeightFormat::INT4_G32}};
    return f;
}

std::string kernel_shape_key(const std::string& format, int64_t rows, int64_t cols) {
    return format + "@" + std::to_string(rows) + "x" + std::to_string(cols);
}

MachineRates measure_kernel_rates(const KernelProbeOptions& o) {
    // in a context on the process default backend: where the engine's passes run (the CLI's --device)
    ExecContext ctx(o.threads);
    MachineRates r;
    r.device = std::string(ops::backend_name(ctx.backend()));
    r.threads = ctx.pool().n_threads();
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    int64_t max_cols = o.matrix_cols, max_rows = o.matrix_rows;
    for (const auto& sh : o.shapes) {
        SLUICE_CHECK(sh.rows > 0 && sh.cols > 0, "kernel probe: shape ", sh.rows, "x", sh.cols);
        max_cols = std::max(max_cols, sh.cols);
        max_rows = std::max(max_rows, sh.rows);
    }
    std::vector<float> src(size_t(max_rows * max_cols));
    for (auto& v : src) v = u(rng);
    const int64_t max_n = o.row_counts.empty() ? 1 : o.row_counts.back();
    std::vector<float> x(size_t(max_n * max_cols)), y(size_t(max_n * max_rows));
    for (auto& v : x) v = u(rng);
    // the fixed cost of a call: a tiny matrix, hot in cache, one row
    {
        const QuantizedWeight q = quantize(src.data(), 16, 256, WeightFormat::BF16);
        const Weight w = q.view();
        r.matmul_overhead_us =
            1e6 * median_call_seconds([&](int64_t) { ops::matmul(w, x.data(), 1, y.data(), ctx); }, o.repetitions,
                                      o.seconds_per_point / 4);
    }
    auto measure = [&](WeightFormat format, int64_t rows, int64_t cols) {
        // copies cycling through a pool of pool_bytes, so the weights are not the cache's (unless it is larger)
        std::vector<QuantizedWeight> copies;
        copies.push_back(quantize(src.data(), rows, cols, format));
        const uint64_t one = copies[0].data.size() + copies[0].scales.size();
        const size_t n_copies = size_t(std::max<uint64_t>(1, o.pool_bytes / std::max<uint64_t>(1, one)));
        while (copies.size() < n_copies) copies.push_back(copies[0]);
        KernelRate k;
        for (int64_t n : o.row_counts) {
            const double s = median_call_seconds(
                [&](int64_t i) { ops::matmul(copies[size_t(i) % copies.size()].view(), x.data(), n, y.data(), ctx); },
                o.repetitions, o.seconds_per_point);
            // the call's fixed cost is accounted apart (matmul_overhead_us)
            const double bytes_s = std::max(s - r.matmul_overhead_us * 1e-6, s * 0.05);
            k.rows.push_back(n);
            k.gbps.push_back(double(one) / bytes_s / 1e9);
        }
        return k;
    };
    for (const auto& [name, format] : probed_formats()) {
        if (!o.formats.empty() && std::find(o.formats.begin(), o.formats.end(), name) == o.formats.end()) continue;
        r.kernels[name] = measure(format, o.matrix_rows, o.matrix_cols);
    }
    for (const auto& sh : o.shapes) {
        const auto& all = probed_formats();
        auto it = std::find_if(all.begin(), all.end(), [&](const auto& f) { return f.first == sh.format; });
        SLUICE_CHECK(it != all.end(), "kernel probe: no CPU format named ", sh.format);
        r.kernels[kernel_shape_key(sh.format, sh.rows, sh.cols)] = measure(it->second, sh.rows, sh.cols);
    }
    return r;
}

FmaPeak measure_fma_peak(int threads) {
    ThreadPool pool(threads);
    const int n = pool.n_threads();
    constexpr int64_t kIterations = int64_t(1) << 21;  // ~50 ms of FMA chains per thread at ~3 GHz
    std::vector<double> gflops;
    for (int rep = 0; rep < 3; ++rep) {
        std::vector<double> flops(size_t(n), 0.0);
        const auto t0 = Clock::now();
        pool.parallel_for(n, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; ++t) flops[size_t(t)] = ops::fma_probe(kIterations);
        });
        double sum = 0;
        for (double f : flops) sum += f;
        gflops.push_back(sum / std::max(1e-9, seconds_since(t0)) / 1e9);
    }
    std::sort(gflops.begin(), gflops.end());
    return {gflops[1], n};
}

}  // namespace sluice
