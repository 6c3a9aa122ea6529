// CPU matmul kernels: GB/s of weight bytes (payload + scales) per format and input row count, next to the machine's
// memory bandwidth from STREAM-like probes (read-only sums over one and over 16 streams per thread, and triad) and
// its f32 FMA peak (independent FMA chains on every thread), in the same run and with the same threads.
// Weights cycle through copies totalling SLUICE_BENCH_POOL_MIB (default 1024) per format, all formats resident, so
// they come from DRAM, as streamed experts do, and in memory advised as huge pages, as the expert cache's is.
// Threads: SLUICE_BENCH_THREADS (default 2); path: SLUICE_CPU_PATH.
// Medians of 5 repetitions, run in random interleaved order by default, so the probes and the kernels sample the
// same periods of a machine whose memory speed drifts (in order, the probes ran minutes before the kernels and the
// ratios swung by a third; --benchmark_enable_random_interleaving=false restores it). A summary table follows.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/huge_pages.h"
#include "core/thread_pool.h"
#include "ops/kda.h"
#include "ops/ops.h"
#include "ops/quantize.h"

namespace sluice {
namespace {

int64_t env_int(const char* name, int64_t fallback) {
    const char* v = std::getenv(name);
    return v && *v ? std::atoll(v) : fallback;
}

int bench_threads() { return int(env_int("SLUICE_BENCH_THREADS", 2)); }
uint64_t pool_bytes() { return uint64_t(env_int("SLUICE_BENCH_POOL_MIB", 1024)) << 20; }

// Probes and weights in huge-page memory, like the expert cache's (see the top of the file).
template <class T>
using HugeVector = std::vector<T, HugePageAllocator<T>>;

ThreadPool& pool() {
    static ThreadPool p(bench_threads());
    return p;
}

// ---- memory bandwidth probe ---------------------------------------------------------------------------------

void BM_MemoryRead(benchmark::State& state) {
    const uint64_t n = pool_bytes() / 8;
    HugeVector<uint64_t> buf(n);
    pool().parallel_for(int64_t(n), [&](int64_t b, int64_t e) {  // first touch from the reading threads
        for (int64_t i = b; i < e; ++i) buf[size_t(i)] = uint64_t(i);
    });
    std::vector<uint64_t> sums(64);
    for (auto _ : state) {
        pool().parallel_for(int64_t(n), [&](int64_t b, int64_t e) {
            uint64_t s[8] = {};
            for (int64_t i = b; i + 8 <= e; i += 8)
                for (int l = 0; l < 8; ++l) s[l] += buf[size_t(i + l)];
            sums[size_t(b * 8 / int64_t(n))] = s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
        });
        benchmark::DoNotOptimize(sums.data());
    }
    state.counters["GB/s"] = benchmark::Counter(double(n * 8) * double(state.iterations()) / 1e9,
                                                benchmark::Counter::kIsRate);
}

// The same read-only sum over 16 streams per thread, 256 bytes from each in turn with software prefetch ahead: the
// access pattern of the matmul kernels (16-row panels). A single stream per core leaves memory-level parallelism
// unused on some machines, so the summary divides by the faster of the two probes.
void BM_MemoryReadStreams(benchmark::State& state) {
    constexpr int64_t kStreams = 16, kRunWords = 32, kAheadWords = 256;  // 256-byte runs, prefetch 2 KiB ahead
    const uint64_t n = pool_bytes() / 8;
    HugeVector<uint64_t> buf(n);
    pool().parallel_for(int64_t(n), [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) buf[size_t(i)] = uint64_t(i);
    });
    std::vector<uint64_t> sums(64);
    for (auto _ : state) {
        pool().parallel_for(int64_t(n), [&](int64_t b, int64_t e) {
            const int64_t len = (e - b) / kStreams / kRunWords * kRunWords;
            uint64_t s[8] = {};
            for (int64_t off = 0; off < len; off += kRunWords)
                for (int64_t k = 0; k < kStreams; ++k) {
                    const uint64_t* p = buf.data() + b + k * len + off;
                    if (off + kAheadWords < len)
                        for (int64_t l = 0; l < kRunWords; l += 8) __builtin_prefetch(p + kAheadWords + l, 0, 3);
                    for (int64_t i = 0; i < kRunWords; i += 8)
                        for (int l = 0; l < 8; ++l) s[l] += p[i + l];
                }
            sums[size_t(b * 8 / int64_t(n))] = s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
        });
        benchmark::DoNotOptimize(sums.data());
    }
    const double bytes = double(n / kStreams / kRunWords * kRunWords * kStreams * 8);  // what was read
    state.counters["GB/s"] = benchmark::Counter(bytes * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

void BM_MemoryTriad(benchmark::State& state) {
    const uint64_t n = pool_bytes() / 3 / 4;
    HugeVector<float> a(n), b(n), c(n);
    pool().parallel_for(int64_t(n), [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i) a[size_t(i)] = b[size_t(i)] = c[size_t(i)] = 1.0f;
    });
    for (auto _ : state) {
        pool().parallel_for(int64_t(n), [&](int64_t s, int64_t e) {
            for (int64_t i = s; i < e; ++i) a[size_t(i)] = b[size_t(i)] + 1.5f * c[size_t(i)];
        });
        benchmark::ClobberMemory();
    }
    state.counters["GB/s"] = benchmark::Counter(double(n * 12) * double(state.iterations()) / 1e9,
                                                benchmark::Counter::kIsRate);
}

// The f32 FMA peak with the same threads: every thread runs independent FMA chains (ops::fma_probe).
void BM_FmaPeak(benchmark::State& state) {
    constexpr int64_t kIterations = 1 << 22;
    std::vector<double> flops(size_t(bench_threads()) * 64);
    for (auto _ : state) {
        pool().parallel_for(bench_threads(), [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; ++t) flops[size_t(t)] = ops::fma_probe(kIterations);
        });
    }
    double per_iteration = 0;
    for (double f : flops) per_iteration += f;
    state.counters["GFLOP/s"] = benchmark::Counter(per_iteration * double(state.iterations()) / 1e9,
                                                   benchmark::Counter::kIsRate);
}

// ---- matmul -------------------------------------------------------------------------------------------------

constexpr int64_t kRows = 2048, kCols = 7168;  // one DeepSeek-V3 expert gate/up projection [out, in]

struct ExpertPool {
    HugeVector<uint8_t> data, scales;
    uint64_t data_stride = 0, scale_stride = 0;
    int count = 0;
    Weight proto;
    Weight at(int i) const {
        Weight w = proto;
        w.data = data.data() + uint64_t(i) * data_stride;
        w.scales = scales.empty() ? nullptr : scales.data() + uint64_t(i) * scale_stride;
        return w;
    }
};

std::unique_ptr<ExpertPool> make_pool(WeightFormat f) {
    std::vector<float> src(size_t(kRows * kCols));
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    for (auto& v : src) v = d(rng);
    const QuantizedWeight q = quantize(src.data(), kRows, kCols, f);
    auto p = std::make_unique<ExpertPool>();
    p->proto = q.view();
    p->data_stride = (q.data.size() + 63) / 64 * 64;
    p->scale_stride = (q.scales.size() + 63) / 64 * 64;
    p->count = int(std::max<uint64_t>(2, pool_bytes() / (p->data_stride + p->scale_stride)));
    p->data.resize(p->data_stride * uint64_t(p->count));
    p->scales.resize(p->scale_stride * uint64_t(p->count));
    for (int i = 0; i < p->count; ++i) {
        std::memcpy(p->data.data() + uint64_t(i) * p->data_stride, q.data.data(), q.data.size());
        if (!q.scales.empty())
            std::memcpy(p->scales.data() + uint64_t(i) * p->scale_stride, q.scales.data(), q.scales.size());
    }
    return p;
}

const ExpertPool& expert_pool(WeightFormat f) {
    static std::map<WeightFormat, std::unique_ptr<ExpertPool>> pools;
    auto it = pools.find(f);
    if (it == pools.end()) it = pools.emplace(f, make_pool(f)).first;  // kept: interleaved runs switch formats often
    return *it->second;
}

void BM_Matmul(benchmark::State& state, WeightFormat f) {
    const int64_t n = state.range(0);
    const ExpertPool& p = expert_pool(f);
    std::vector<float> x(size_t(n * kCols), 0.5f), y(size_t(n * kRows));
    int i = 0;
    for (auto _ : state) {
        ops::cpu::matmul(p.at(i), x.data(), n, y.data(), pool());
        i = (i + 1) % p.count;
        benchmark::DoNotOptimize(y.data());
    }
    const double bytes = double(p.proto.data_bytes() + p.proto.scale_bytes());
    state.counters["GB/s"] = benchmark::Counter(bytes * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
    state.counters["rows/s"] = benchmark::Counter(double(n) * double(state.iterations()), benchmark::Counter::kIsRate);
    state.SetLabel(std::string(ops::cpu_path_name(ops::cpu_path())));
}

// ---- long contexts: attention and KDA per prefill row (issue: neither may dominate a chunk) --------------------

// Kimi K3's shapes: MLA absorbed into the latent (96 heads, keys of 512 + 64, values of 512, one shared kv head) and
// KDA (96 heads of 128). Attention: kAttnRows query rows at the end of a context of state.range(0) tokens (a row's
// cost depends on its position alone; at 32k tokens 16 rows are already ~110 GFLOP). KDA: a chunk of kChunkRows.
constexpr int64_t kChunkRows = 512, kAttnRows = 16, kHeads = 96, kLatent = 512, kRopeDim = 64, kKdaDim = 128;

void BM_MlaAttention(benchmark::State& state) {
    const int64_t ctx_tokens = state.range(0), cw = kLatent + kRopeDim;
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> cache(size_t(ctx_tokens * cw)), q(size_t(kAttnRows * kHeads * cw)),
        out(size_t(kAttnRows * kHeads * kLatent));
    for (auto& v : cache) v = u(rng);
    for (auto& v : q) v = u(rng);
    std::vector<int64_t> pos(static_cast<size_t>(kAttnRows));
    for (int64_t i = 0; i < kAttnRows; ++i) pos[size_t(i)] = ctx_tokens - kAttnRows + i;
    AttentionParams ap;
    ap.n_heads = kHeads;
    ap.n_kv_heads = 1;
    ap.head_dim_k = cw;
    ap.head_dim_v = kLatent;
    ap.scale = 1.0f / 16.0f;
    for (auto _ : state) {
        ops::cpu::attention(ap, q.data(), kAttnRows, pos.data(), cache.data(), cw, cache.data(), cw, out.data(),
                            pool());
        benchmark::DoNotOptimize(out.data());
    }
    // q.k over 576 and p.v over 512 per head and visible key, about ctx - rows/2 keys per row
    const double keys = double(ctx_tokens) - double(kAttnRows) / 2;
    state.counters["rows/s"] = benchmark::Counter(double(kAttnRows) * double(state.iterations()), benchmark::Counter::kIsRate);
    state.counters["GFLOP/s"] = benchmark::Counter(
        2.0 * double(kHeads) * double(cw + kLatent) * keys * double(kAttnRows) * double(state.iterations()) / 1e9,
        benchmark::Counter::kIsRate);
}

void BM_KdaRecurrent(benchmark::State& state) {  // the delta rule: a fixed state, the same cost at any context
    const int64_t P = kHeads * kKdaDim;
    std::mt19937 rng(4);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> q(size_t(kChunkRows * P)), k(q.size()), v(q.size()), g(q.size()), o(q.size()),
        beta(size_t(kChunkRows * kHeads)), S(size_t(kHeads * kKdaDim * kKdaDim), 0.0f);
    for (auto* a : {&q, &k, &v}) for (auto& x : *a) x = u(rng) * 0.088f;  // about unit rows of 128
    for (auto& x : g) x = -0.05f * (1.0f + u(rng));
    for (auto& x : beta) x = 0.5f + 0.4f * u(rng);
    const KdaHeadIo io{q.data(), k.data(), v.data(), g.data(), beta.data(), o.data(), P, kHeads};
    for (auto _ : state) {  // the blocks' entry (the heads over the pool), on the CPU
        ops::kda_recurrent_heads(io, kHeads, kChunkRows, kKdaDim, S.data(), ops::Backend::Cpu, &pool());
        benchmark::DoNotOptimize(o.data());
    }
    state.counters["rows/s"] = benchmark::Counter(double(kChunkRows) * double(state.iterations()), benchmark::Counter::kIsRate);
}

// ---- summary ------------------------------------------------------------------------------------------------

// Console output as usual, plus the medians collected for a table at the end.
class SummaryReporter : public benchmark::ConsoleReporter {
public:
    void ReportRuns(const std::vector<Run>& runs) override {
        for (const Run& r : runs)
            if (r.aggregate_name == "median") {
                const std::string name = r.run_name.str();
                // Main-thread CPU time stands in for wall time on a loaded machine (each thread does 1/threads of
                // the work), so "cpu" figures say what the kernels do when they get their cores.
                const double cpu_over_real = r.GetAdjustedRealTime() / std::max(1e-12, r.GetAdjustedCPUTime());
                gbps_[name] = r.counters.count("GB/s") ? double(r.counters.at("GB/s"))
                              : r.counters.count("GFLOP/s") ? double(r.counters.at("GFLOP/s"))
                                                             : 0;
                rows_[name] = r.counters.count("rows/s") ? double(r.counters.at("rows/s")) : 0;
                gbps_cpu_[name] = gbps_[name] * cpu_over_real;
                rows_cpu_[name] = rows_[name] * cpu_over_real;
            }
        ConsoleReporter::ReportRuns(runs);
    }

    void print_summary() const {
        print_table("wall time", gbps_, rows_);
        print_table("main-thread CPU time", gbps_cpu_, rows_cpu_);
    }

private:
    static void print_table(const char* clock, const std::map<std::string, double>& gbps_,
                            const std::map<std::string, double>& rows_) {
        const double read1 = find(gbps_, "BM_MemoryRead"), read16 = find(gbps_, "BM_MemoryReadStreams"),
                     triad = find(gbps_, "BM_MemoryTriad");
        const double read = std::max(read1, read16);
        std::printf("\nSummary by %s (medians; %d threads; path %s; cpu: %s)\n", clock, bench_threads(),
                    std::string(ops::cpu_path_name(ops::cpu_path())).c_str(), cpu_features().describe().c_str());
        std::printf("memory bandwidth: read %.1f GB/s (one stream per thread %.1f, 16 streams %.1f), triad %.1f GB/s\n",
                    read, read1, read16, triad);
        const double peak = find(gbps_, "BM_FmaPeak");
        std::printf("f32 FMA peak: %.1f GFLOP/s (%s)\n", peak, peak > 0 ? "independent chains on every thread" : "-");
        std::printf("%-8s %10s %10s %10s %10s   %8s  %s   %s\n", "format", "n=1", "n=8", "n=32", "n=128", "n1/read",
                    "rows/s n=32 / n=1", "GFLOP/s n=32, 128, 512 (of the FMA peak)");
        for (const char* f : {"bf16", "mxfp4", "int4", "fp8", "q8_0"}) {
            double g[4];
            const int ns[4] = {1, 8, 32, 128};
            for (int k = 0; k < 4; ++k) g[k] = find(gbps_, "BM_Matmul/" + std::string(f) + "/" + std::to_string(ns[k]));
            if (g[0] == 0 && g[1] == 0 && g[2] == 0 && g[3] == 0 &&
                find(gbps_, "BM_Matmul/" + std::string(f) + "/512") == 0)
                continue;  // filtered out of this run
            const double r1 = find(rows_, std::string("BM_Matmul/") + f + "/1"),
                         r32 = find(rows_, std::string("BM_Matmul/") + f + "/32");
            auto cell = [](double v, const char* fmt) {  // "-" where this run did not measure it
                char buf[32];
                if (v > 0 && v < 10 && std::string(fmt) == "%.1f")  // three significant digits for n=32 and up
                    std::snprintf(buf, sizeof buf, "%.2f", v);
                else if (v > 0)
                    std::snprintf(buf, sizeof buf, fmt, v);
                else
                    std::snprintf(buf, sizeof buf, "-");
                return std::string(buf);
            };
            const double r128 = find(rows_, std::string("BM_Matmul/") + f + "/128"),
                         r512 = find(rows_, std::string("BM_Matmul/") + f + "/512");
            const double flop_per_row = 2.0 * double(kRows) * double(kCols);
            const double f32 = r32 * flop_per_row / 1e9, f128 = r128 * flop_per_row / 1e9,
                         f512 = r512 * flop_per_row / 1e9;
            auto share = [&](double v) { return peak > 0 ? 100 * v / peak : 0; };
            char flops[128] = "-";
            if (f32 > 0 || f128 > 0 || f512 > 0)
                std::snprintf(flops, sizeof flops, "%.0f, %.0f, %.0f (%.0f%%, %.0f%%, %.0f%%)", f32, f128, f512,
                              share(f32), share(f128), share(f512));
            std::printf("%-8s %10s %10s %10s %10s   %8s  %17s   %s\n", f, cell(g[0], "%.1f").c_str(),
                        cell(g[1], "%.1f").c_str(), cell(g[2], "%.1f").c_str(), cell(g[3], "%.1f").c_str(),
                        cell(read > 0 && g[0] > 0 ? 100 * g[0] / read : 0, "%.0f%%").c_str(),
                        cell(r1 > 0 && r32 > 0 ? r32 / r1 : 0, "%.1fx").c_str(), flops);
        }
        std::printf("(GB/s counts weight payload + scale bytes read once per call)\n");
        const double a4 = find(rows_, "BM_MlaAttention/4096"), a32 = find(rows_, "BM_MlaAttention/32768"),
                     kda = find(rows_, "BM_KdaRecurrent");
        if (a4 > 0 || a32 > 0 || kda > 0) {
            std::printf("long contexts, per prefill row at the context's end (Kimi K3 shapes; one layer):\n");
            auto attn = [&](const char* what, double rows_per_s, const std::string& name) {
                if (rows_per_s <= 0) return;
                const double g = find(gbps_, name);
                std::printf("  MLA attention, %s: %.3f ms per row (%.1f GFLOP/s, %.0f%% of the FMA peak)\n", what,
                            1e3 / rows_per_s, g, peak > 0 ? 100 * g / peak : 0);
            };
            attn("context 4096", a4, "BM_MlaAttention/4096");
            attn("context 32768", a32, "BM_MlaAttention/32768");
            if (kda > 0) std::printf("  KDA delta rule, any context: %.3f ms per row\n", 1e3 / kda);
        }
    }

    static double find(const std::map<std::string, double>& m, const std::string& prefix) {
        for (const auto& [k, v] : m)
            if (k.rfind(prefix, 0) == 0 && (k.size() == prefix.size() || k[prefix.size()] == '/')) return v;
        return 0;
    }
    std::map<std::string, double> gbps_, rows_, gbps_cpu_, rows_cpu_;
};

void register_all() {
    auto common = [](benchmark::internal::Benchmark* b) {
        b->UseRealTime()->Repetitions(5)->ReportAggregatesOnly(true)->Unit(benchmark::kMillisecond);
    };
    common(benchmark::RegisterBenchmark("BM_MemoryRead", BM_MemoryRead));
    common(benchmark::RegisterBenchmark("BM_MemoryReadStreams", BM_MemoryReadStreams));
    common(benchmark::RegisterBenchmark("BM_MemoryTriad", BM_MemoryTriad));
    common(benchmark::RegisterBenchmark("BM_FmaPeak", BM_FmaPeak));
    common(benchmark::RegisterBenchmark("BM_MlaAttention", BM_MlaAttention)->Arg(4096)->Arg(32768));
    common(benchmark::RegisterBenchmark("BM_KdaRecurrent", BM_KdaRecurrent));  // ~1 s and ~10 s an iteration at 32k
    const std::pair<const char*, WeightFormat> formats[] = {{"bf16", WeightFormat::BF16},
                                                            {"mxfp4", WeightFormat::MXFP4},
                                                            {"int4", WeightFormat::INT4_G32},
                                                            {"fp8", WeightFormat::FP8_E4M3_B128},
                                                            {"q8_0", WeightFormat::Q8_0}};
    for (const auto& [name, f] : formats) {
        auto* b = benchmark::RegisterBenchmark((std::string("BM_Matmul/") + name).c_str(), BM_Matmul, f);
        b->Arg(1)->Arg(8)->Arg(32)->Arg(128)->Arg(512);
        common(b);
    }
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) {
    // Interleaved repetitions unless the command line says otherwise (a later flag overrides this one).
    std::vector<char*> args(argv, argv + argc);
    static char interleave[] = "--benchmark_enable_random_interleaving=true";
    args.insert(args.begin() + 1, interleave);
    int args_n = int(args.size());
    args.push_back(nullptr);
    benchmark::Initialize(&args_n, args.data());
    sluice::register_all();
    sluice::SummaryReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    reporter.print_summary();
    benchmark::Shutdown();
    return 0;
}
