// sluice bench -m DIR --memory SIZE --tokens N [--prompt-tokens P] [--parallel B] [--json]
// Decodes from a cold start with experts streamed under the budget and, in the same run (before the prefill and after
// the decode; the faster counts), measures the drive's raw rate with random reads of expert-sized extents at the
// same queue depth and no compute, and reports the ratios:
// io_efficiency = achieved read GB/s / raw GB/s (with a streamed spine: the time these reads need at the raw rates
// of their extent sizes / the decode time), overlap = token time / max(I/O time, compute time).
// --parallel B (> 1): then B copies of the job decode together through the Engine on a freshly loaded (cold) model,
// reporting aggregate tok/s and expert bytes read per generated token next to B = 1 (each expert is read once for
// all the rows that chose it, so bytes per token fall as B grows).
// --save-rates FILE: also writes the rates `sluice plan --rates` projects from (plan/rates.h): the raw drive rate above,
// one read's latency alone (queue depth 1), and the matmul kernels' GB/s per weight format and row count
// (plan/kernel_probe.h, on a --rates-pool working set, with the model's thread count).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "commands.h"
#include "common.h"
#include "core/error.h"
#include "core/phase_times.h"
#include "experts/residency.h"
#include "io/read_probe.h"
#include "models/model.h"
#include "ops/cuda/backend.h"
#include "ops/ops.h"
#include "plan/kernel_probe.h"
#include "plan/model_shape.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"

namespace sluice::cli {

namespace {
using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}
uint64_t peak_rss_bytes() {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return uint64_t(ru.ru_maxrss) * 1024;
}
struct Phase {
    double wall_ms = 0;
    ExpertIoStats io;
    LayerCacheStats cache;
};
ExpertIoStats delta(const ExpertIoStats& a, const ExpertIoStats& b) {
    ExpertIoStats d;
    d.fetch_calls = b.fetch_calls - a.fetch_calls;
    d.experts_requested = b.experts_requested - a.experts_requested;
    d.experts_read = b.experts_read - a.experts_read;
    d.bytes_read = b.bytes_read - a.bytes_read;
    d.device_bytes_read = b.device_bytes_read - a.device_bytes_read;
    d.io_wait_ms = b.io_wait_ms - a.io_wait_ms;
    d.fetch_ms = b.fetch_ms - a.fetch_ms;
    d.prefetch_issued = b.prefetch_issued - a.prefetch_issued;
    d.prefetch_used = b.prefetch_used - a.prefetch_used;
    return d;
}
}  // namespace

void register_bench(CLI::App& app) {
    struct Args {
        ModelArgs m;
        int64_t tokens = 16, prompt_tokens = 16, chunk = 256;
        double raw_seconds = 3.0;
        uint64_t seed = 1;
        bool json = false;
        bool greedy = false;
        std::string save_rates, rates_pool = "64M", rates_formats = "all";
    };
    auto a = std::make_shared<Args>();
    auto* sub = app.add_subcommand("bench", "Cold decode with experts streamed under --memory, next to the drive's raw rate");
    add_model_args(sub, a->m);
    add_trace_arg(sub, a->m);  // traces the B = 1 run (the --parallel reload is not traced)
    sub->add_option("--tokens", a->tokens, "tokens to decode")->check(positive())->capture_default_str();
    sub->add_option("--prompt-tokens", a->prompt_tokens, "random prompt length (prefilled in --chunk rows)")
        ->check(positive())->capture_default_str();
    sub->add_option("--chunk", a->chunk, "prefill rows per forward pass")->check(positive())->capture_default_str();
    sub->add_option("--raw-seconds", a->raw_seconds, "duration of the raw read probe")
        ->check(positive())
        ->capture_default_str();
    sub->add_option("-s,--seed", a->seed, "seed of the random prompt")->capture_default_str();
    sub->add_flag("--json", a->json, "last line of stdout: one JSON object");
    sub->add_option("--save-rates", a->save_rates,
                    "write the measured drive and kernel rates to FILE, for sluice plan --rates FILE");
    sub->add_option("--rates-pool", a->rates_pool,
                    "working set of the kernel probe of --save-rates (larger than the last-level cache: DRAM rates)")
        ->capture_default_str();
    sub->add_flag("--greedy", a->greedy,
                  "decode the argmax token (default: a random token each step, since a random-weight model's greedy "
                  "output repeats itself and would route every step to the same, cached experts)");
    sub->add_option("--rates-formats", a->rates_formats,
                    "weight formats --save-rates probes: all (f32, bf16, f16, fp8, mxfp4, int4) or model (this "
                    "model's only: quicker, for measuring rates next to each run)")
        ->check(CLI::IsMember({"all", "model"}))
        ->capture_default_str();
    sub->callback([a] {
        LoadOptions lo = a->m.to_options();
        if (lo.memory_budget_bytes == 0) lo.stream_experts = true;
        lo.max_pass_rows = std::max<int64_t>(a->chunk, a->m.parallel);  // the largest pass below
        const int64_t per_seq_tokens = a->prompt_tokens + a->tokens + 1;  // each --parallel copy's reservation
        SLUICE_CHECK(a->m.parallel == 1 || a->m.parallel * per_seq_tokens <= lo.max_context_tokens,
                     "bench: --parallel ", a->m.parallel, " copies of ", per_seq_tokens, " tokens need --ctx >= ",
                     a->m.parallel * per_seq_tokens);
        auto model = load_model(a->m.model, lo);
        const StreamingExpertSource* s = model->streaming();
        SLUICE_CHECK(s, a->m.model, ": bench needs a model with routed experts to stream");
        const ModelInfo& info = model->info();

        std::mt19937_64 rng(a->seed);
        std::vector<int32_t> prompt(static_cast<size_t>(a->prompt_tokens));
        for (auto& t : prompt) t = int32_t(rng() % uint64_t(info.vocab_size));

        // raw device rate: random expert-sized reads, same backend and queue depth, no compute; measured before the
        // prefill and after the decode (cloud and consumer drives vary with their recent load), the faster counts
        io::ReadProbeOptions po;
        for (uint32_t f = 0; f < s->reader().n_files(); ++f) po.files.push_back(s->reader().path(f));
        po.extent_bytes = std::max<uint64_t>(info.expert_bytes / 3, 4096);
        po.queue_depth = a->m.queue_depth;
        po.duration_s = a->raw_seconds;
        po.method = s->reader().backend() == io::Backend::Uring ? io::ProbeMethod::Uring
                    : s->reader().backend() == io::Backend::Pread ? io::ProbeMethod::Pread
                                                                  : io::ProbeMethod::Buffered;
        // files smaller than one extent cannot be probed; keep the ones that can
        std::vector<std::string> usable;
        for (const auto& f : po.files) {
            FILE* fp = std::fopen(f.c_str(), "rb");
            if (!fp) continue;
            std::fseek(fp, 0, SEEK_END);
            if (uint64_t(std::ftell(fp)) >= po.extent_bytes * 2) usable.push_back(f);
            std::fclose(fp);
        }
        SLUICE_CHECK(!usable.empty(), "bench: no checkpoint file is large enough for the raw read probe");
        po.files = usable;
        const io::ReadProbeResult raw_before = io::measure_read_gbps(po);
        // spine streamed layer by layer when the budget is below it (zeros otherwise); its reads are large and
        // sequential, so the drive's raw rate for them is probed with layer-sized extents (capped at 64 MiB)
        const SpineStreamer* sp = model->spine_streamer();
        io::ReadProbeOptions spo = po;
        io::ReadProbeResult spine_raw_before;
        if (sp) {
            uint64_t layer = 0;
            for (uint64_t b : sp->layer_bytes()) layer = std::max(layer, b);
            spo.extent_bytes = std::clamp<uint64_t>(layer, po.extent_bytes, uint64_t(64) << 20);
            spine_raw_before = io::measure_read_gbps(spo);
        }
        auto spine_stats = [sp] { return sp ? sp->stats() : SpineStreamStats{}; };
        // prefill
        const SpineStreamStats sp0 = spine_stats();
        const bool on_cuda = ops::backend() == ops::Backend::Cuda;
        const cuda::Stats g0 = on_cuda ? cuda::stats() : cuda::Stats{};
        const auto ph0 = phase_times::snapshot_ms();
        const double flops0 = phase_times::matmul_flops();
        // one request through the engine, like every other client: the prompt in --chunk rows per pass, then
        // `tokens` decode passes (the first token comes from the prefill's last pass)
        Engine engine(*model, {.max_batch_rows = a->chunk, .max_sequences = 1,
                               .max_context_tokens = lo.max_context_tokens});
        {
            RequestParams rp;
            rp.prompt = prompt;
            rp.max_new_tokens = a->tokens + 1;
            rp.stop_at_eos = false;
            // a near-uniform draw: a random-weight model's greedy output repeats and would route to cached experts
            rp.sampling = {.temperature = a->greedy ? 0.0f : 1e4f, .seed = a->seed};
            engine.submit(std::move(rp), [](const TokenEvent&) { return true; });
        }
        auto io0 = s->stats();
        // what the prefill reads through the memory map (the resident spine at its first use; the probe above left
        // the checkpoint out of the page cache): the checkpoint's page-cache bytes gained during it
        std::vector<std::string> ck_files;
        for (const auto& e : std::filesystem::directory_iterator(a->m.model))
            if (e.path().extension() == ".safetensors") ck_files.push_back(e.path().string());
        auto cached = [&ck_files] {
            uint64_t b = 0;
            for (const auto& f : ck_files) b += io::page_cache_bytes(f);
            return b;
        };
        const uint64_t cached0 = cached();
        auto t0 = Clock::now();
        while (engine.stats().prompt_tokens < a->prompt_tokens) engine.step();  // the prefill and the first token
        auto t1 = Clock::now();
        const uint64_t cached1 = cached();
        const double pre_mapped_bytes = double(cached1 - std::min(cached0, cached1));
        const auto t1_decode = Clock::now();  // the decode's time leaves out the page-cache count above
        const SpineStreamStats sp1 = spine_stats();
        auto io1 = s->stats();
        const cuda::Stats g1 = on_cuda ? cuda::stats() : cuda::Stats{};
        const auto ph1 = phase_times::snapshot_ms();
        const double prefill_flops = phase_times::matmul_flops() - flops0;
        auto c1 = s->cache().total_stats();
        // decode
        const int64_t gen0 = engine.stats().generated_tokens;
        engine.run_until_idle();
        SLUICE_CHECK(engine.stats().generated_tokens - gen0 == a->tokens, "bench: the engine decoded ",
                     engine.stats().generated_tokens - gen0, " tokens, not ", a->tokens);
        auto t2 = Clock::now();
        const SpineStreamStats sp2 = spine_stats();
        auto io2 = s->stats();
        const cuda::Stats g2 = on_cuda ? cuda::stats() : cuda::Stats{};
        const auto ph2 = phase_times::snapshot_ms();
        auto c2 = s->cache().total_stats();
        const uint64_t rss = peak_rss_bytes();
        const io::ReadProbeResult raw_after = io::measure_read_gbps(po);
        const io::ReadProbeResult& raw = raw_after.gbps >= raw_before.gbps ? raw_after : raw_before;
        if (!a->save_rates.empty()) {
            KernelProbeOptions ko;
            ko.threads = lo.n_threads;
            ko.pool_bytes = parse_size(a->rates_pool);
            if (a->rates_formats == "model") {
                const ModelShape shape = shape_from_folder(a->m.model);
                for (const auto& [fmt, bytes] : shape.spine_matmul_bytes) ko.formats.push_back(fmt);
                ko.formats.push_back(shape.expert_format);
                if (!shape.head_format.empty()) ko.formats.push_back(shape.head_format);
                for (const auto& rc : shape.expert_matrix_shapes)  // the experts' own shapes too
                    if (std::none_of(ko.shapes.begin(), ko.shapes.end(),
                                     [&](const auto& x) { return x.rows == rc.first && x.cols == rc.second; }))
                        ko.shapes.push_back({shape.expert_format, rc.first, rc.second});
            }
            MachineRates rates = measure_kernel_rates(ko);
            rates.drive_gbps = raw.gbps;
            rates.drive_method = raw.method;
            io::ReadProbeOptions lat = po;
            lat.queue_depth = 1;
            lat.duration_s = std::min(1.0, a->raw_seconds);
            rates.drive_latency_ms = io::measure_read_gbps(lat).p50_ms;
            {
                std::ofstream f(a->save_rates, std::ios::binary | std::ios::trunc);
                f << rates_to_json(rates);
                SLUICE_CHECK(f.good(), a->save_rates, ": cannot write the rates file");
            }
            std::fprintf(stderr, "  rates   written to %s (drive %.2f GB/s, %.3f ms per read alone; kernels on %s)\n",
                         a->save_rates.c_str(), rates.drive_gbps, rates.drive_latency_ms, a->rates_pool.c_str());
        }
        const double spine_raw_gbps = sp ? std::max(spine_raw_before.gbps, io::measure_read_gbps(spo).gbps) : 0.0;


        const auto pre = delta(io0, io1), dec = delta(io1, io2);
        const double prefill_ms = ms_between(t0, t1), decode_ms = ms_between(t1_decode, t2);
        const double tok_per_s = 1000.0 * double(a->tokens) / decode_ms;
        const uint64_t spine_dec_bytes = sp2.bytes_read - sp1.bytes_read;
        const double spine_dec_wait_ms = sp2.wait_ms - sp1.wait_ms;
        const uint64_t dec_device_bytes = dec.device_bytes_read + spine_dec_bytes;
        const double read_gbps = double(dec_device_bytes) / 1e6 / decode_ms;
        // what the drive needs for exactly these reads at its raw rates (experts: random expert-sized extents; a
        // streamed spine: layer-sized extents); io_efficiency = that / the time the decode took
        const double io_time_ms =
            (raw.gbps > 0 ? double(dec.device_bytes_read) / 1e6 / raw.gbps : 0) +
            (spine_raw_gbps > 0 ? double(spine_dec_bytes) / 1e6 / spine_raw_gbps : 0);
        const double io_efficiency = io_time_ms / std::max(1e-9, decode_ms);
        const double compute_ms = decode_ms - dec.io_wait_ms - spine_dec_wait_ms;
        const double overlap = decode_ms / std::max(1e-9, std::max(io_time_ms, compute_ms));
        // what a token's compute spends outside the weight matmuls and expert groups (plan --token-overhead-ms)
        const double matmul_ms_per_token =
            (ph2[phase_times::kMatmul] - ph1[phase_times::kMatmul]) / double(a->tokens);
        const double other_ms_per_token = std::max(0.0, compute_ms / double(a->tokens) - matmul_ms_per_token);
        const uint64_t hits = c2.hits - c1.hits, misses = c2.misses - c1.misses;
        const double hit_rate = hits + misses ? double(hits) / double(hits + misses) : 0;
        const uint64_t budget = lo.memory_budget_bytes;

        std::fprintf(stderr,
                     "bench: %s, %lld MoE layers x %lld experts (%s each), budget %s (model %s)\n"
                     "  prefill %lld tokens: %.1f ms, %.2f MB read per prompt token (%llu experts read / %llu used)\n"
                     "  decode  %lld tokens: %.3f tok/s, %.2f MB read per token, hit rate %.1f%%, read ahead %.1f (%.1f used) per token\n"
                     "  reads   %.2f GB/s achieved vs %.2f GB/s raw (%s qd %u, %s extents; %.2f before, %.2f after): io_efficiency %.2f\n"
                     "  time    per token %.1f ms: I/O needs %.1f ms, compute %.1f ms (waiting %.1f ms): overlap %.2f\n"
                     "  memory  peak RSS %s (budget %s)\n",
                     model->info().architecture.c_str(), (long long)info.n_moe_layers, (long long)info.n_routed_experts,
                     format_bytes(info.expert_bytes).c_str(), budget ? format_bytes(budget).c_str() : "none",
                     format_bytes(info.spine_bytes + info.routed_expert_bytes_total).c_str(), (long long)a->prompt_tokens,
                     prefill_ms, double(pre.bytes_read) / 1e6 / double(a->prompt_tokens),
                     (unsigned long long)pre.experts_read, (unsigned long long)pre.experts_requested,
                     (long long)a->tokens, tok_per_s, double(dec.bytes_read) / 1e6 / double(a->tokens), 100 * hit_rate,
                     double(dec.prefetch_issued) / double(a->tokens), double(dec.prefetch_used) / double(a->tokens),
                     read_gbps, raw.gbps, raw.method.c_str(), po.queue_depth, format_bytes(po.extent_bytes).c_str(),
                     raw_before.gbps, raw_after.gbps,
                     io_efficiency, decode_ms / double(a->tokens),
                     io_time_ms / double(a->tokens), compute_ms / double(a->tokens), dec.io_wait_ms / double(a->tokens),
                     overlap, format_bytes(rss).c_str(), budget ? format_bytes(budget).c_str() : "none");
        std::fprintf(stderr, "  compute per token: weight matmuls and expert groups %.2f ms, the rest %.2f ms (norms, attention, "
                     "routing, sampling, the engine; plan --token-overhead-ms)\n",
                     matmul_ms_per_token, other_ms_per_token);
        if (sp)
            std::fprintf(stderr, "  spine   streamed from layer %lld: %.2f MB read per decoded token, %.2f per prompt token; waited %.1f ms per token; raw %.2f GB/s (%s extents)\n",
                         (long long)sp->first_streamed(), double(spine_dec_bytes) / 1e6 / double(a->tokens),
                         double(sp1.bytes_read - sp0.bytes_read) / 1e6 / double(a->prompt_tokens),
                         spine_dec_wait_ms / double(a->tokens), spine_raw_gbps, format_bytes(spo.extent_bytes).c_str());
        {   // the prefill against its I/O limit: its reads (experts, streamed spine) at the raw rates probed here, and
            // apart, what a cold start adds: the resident spine read through the memory map at its first use
            const double pre_spine_bytes = double(sp1.bytes_read - sp0.bytes_read);
            const double pre_io_ms = double(pre.device_bytes_read) / 1e6 / std::max(1e-9, raw.gbps) +
                                     (spine_raw_gbps > 0 ? pre_spine_bytes / 1e6 / spine_raw_gbps : 0);
            const double mapped_ms = pre_mapped_bytes / 1e6 / std::max(1e-9, raw.gbps);
            std::fprintf(stderr, "  limit   prefill reads need %.1f ms at the raw rate (%.2f GB): %.2f of the prefill's time; "
                         "with the memory map's first reads (%.2f GB: the resident spine, cold) %.1f ms: %.2f\n",
                         pre_io_ms, (double(pre.device_bytes_read) + pre_spine_bytes) / 1e9, pre_io_ms / std::max(1e-9, prefill_ms),
                         pre_mapped_bytes / 1e9, pre_io_ms + mapped_ms, (pre_io_ms + mapped_ms) / std::max(1e-9, prefill_ms));
        }
        if (!on_cuda && prefill_flops > 0) {  // the compute side's limit: the weight matmuls' flops at the FMA peak
            const FmaPeak peak = measure_fma_peak(lo.n_threads);
            const double at_peak_ms = prefill_flops / 1e9 / std::max(1e-9, peak.gflops) * 1e3;
            std::fprintf(stderr,
                         "  limit   prefill weight matmuls %.0f GFLOP (%.1f GFLOP/s over the prefill) need %.1f ms at the "
                         "f32 FMA peak (%.1f GFLOP/s, %d threads, probed now): %.2f of the prefill's time\n",
                         prefill_flops / 1e9, prefill_flops / 1e6 / std::max(1e-9, prefill_ms), at_peak_ms,
                         peak.gflops, peak.threads, at_peak_ms / std::max(1e-9, prefill_ms));
        }
        // matmul calls and expert groups (each of whose matrices is a weight use)
        auto busy = [](const cuda::Stats& g) { return g.busy_ms + g.group_ms; };
        auto uses = [](const cuda::Stats& g) { return g.calls + g.group_weights; };
        if (on_cuda)  // where the time went: weight matmuls and attention on the GPU (copies and kernels), the rest
            std::fprintf(stderr,
                         "  device  cuda (%s): weight matmuls and expert groups %.1f and attention %.1f of the prefill's "
                         "%.1f ms (%s up, weights %s, keys and values %s); %.1f and %.1f of %.1f ms per decoded token (%s "
                         "up; %.1f%% of its weight uses from copies kept on the card, %s kept)\n",
                         cuda::device_info().name.c_str(), busy(g1) - busy(g0), g1.attention_ms - g0.attention_ms,
                         prefill_ms, format_bytes(g1.h2d_bytes - g0.h2d_bytes).c_str(),
                         format_bytes(g1.weight_upload_bytes - g0.weight_upload_bytes).c_str(),
                         format_bytes(g1.attention_kv_bytes - g0.attention_kv_bytes).c_str(),
                         (busy(g2) - busy(g1)) / double(a->tokens),
                         (g2.attention_ms - g1.attention_ms) / double(a->tokens), decode_ms / double(a->tokens),
                         format_bytes((g2.h2d_bytes - g1.h2d_bytes) / uint64_t(a->tokens)).c_str(),
                         100.0 * double(g2.weight_hits - g1.weight_hits) /
                             double(std::max<uint64_t>(1, uses(g2) - uses(g1))),
                         format_bytes(g2.resident_weight_bytes).c_str());
        if (on_cuda)
            std::fprintf(stderr,
                         "  device  prefill matmul calls and expert groups on the card's timeline: placing weights %.1f ms (kept copies' "
                         "allocation and first upload, per-call copies), activations across %.1f, kernels %.1f; "
                         "decode per token: %.1f, %.1f, %.1f\n",
                         g1.place_ms - g0.place_ms, g1.activation_copy_ms - g0.activation_copy_ms,
                         g1.kernel_ms - g0.kernel_ms, (g2.place_ms - g1.place_ms) / double(a->tokens),
                         (g2.activation_copy_ms - g1.activation_copy_ms) / double(a->tokens),
                         (g2.kernel_ms - g1.kernel_ms) / double(a->tokens));
        {  // host wall time of the blocks (core/phase_times.h): where a pass spends what the device lines do not show
            auto f1 = [](double v) {
                char b[32];
                std::snprintf(b, sizeof b, "%.1f", v);
                return std::string(b);
            };
            std::string pre, dec;
            for (int i = 0; i < phase_times::kCount; ++i) {
                const double p = ph1[size_t(i)] - ph0[size_t(i)], d = (ph2[size_t(i)] - ph1[size_t(i)]) / double(a->tokens);
                if (p <= 0 && d <= 0) continue;
                const char* nm = phase_times::name(phase_times::Phase(i));
                pre += std::string(pre.empty() ? "" : ", ") + nm + " " + f1(p);
                dec += std::string(dec.empty() ? "" : ", ") + nm + " " + f1(d);
            }
            std::fprintf(stderr, "  blocks  prefill ms: %s (of %.1f); decode ms per token: %s (of %.1f)\n", pre.c_str(),
                         prefill_ms, dec.c_str(), decode_ms / double(a->tokens));
        }
        if (on_cuda)
            std::fprintf(stderr, "  device  KDA delta rule on the card: %.1f ms of the prefill (%llu calls), %.2f per decoded token\n",
                         g1.kda_ms - g0.kda_ms, (unsigned long long)(g1.kda_calls - g0.kda_calls),
                         (g2.kda_ms - g1.kda_ms) / double(a->tokens));
        const UsagePinStats pins = s->pin_stats();
        const int64_t B = a->m.parallel;
        double par_tok_per_s = 0, par_bytes_per_token = 0, par_io_limit_tok_per_s = 0;
        if (B > 1) {
            const int64_t vocab = info.vocab_size;
            model.reset();  // cold again: the B = 1 run must not warm the cache for this one
            lo.streaming.trace_path.clear();  // the trace (closed just now) is the B = 1 run's
            model = load_model(a->m.model, lo);
            Engine engine(*model, {.max_batch_rows = std::max(a->chunk, B), .max_sequences = B,
                                   .max_context_tokens = lo.max_context_tokens});
            for (int64_t i = 0; i < B; ++i) {
                RequestParams rp;
                for (int64_t t = 0; t < a->prompt_tokens; ++t) rp.prompt.push_back(int32_t(rng() % uint64_t(vocab)));
                rp.max_new_tokens = a->tokens + 1;  // the first comes from the prefill; then `tokens` decode passes
                rp.stop_at_eos = false;
                // a near-uniform draw stands in for the random token of the B = 1 run
                rp.sampling = {.temperature = a->greedy ? 0.0f : 1e4f, .seed = a->seed + uint64_t(i)};
                engine.submit(std::move(rp), [](const TokenEvent&) { return true; });
            }
            while (engine.stats().prompt_tokens < B * a->prompt_tokens) engine.step();  // prefills, first tokens
            const auto pio0 = model->streaming()->stats();
            const SpineStreamer* psp = model->spine_streamer();
            const SpineStreamStats psp0 = psp ? psp->stats() : SpineStreamStats{};
            const int64_t gen0 = engine.stats().generated_tokens;
            const auto pt0 = Clock::now();
            engine.run_until_idle();
            const double par_ms = ms_between(pt0, Clock::now());
            const int64_t par_tokens = engine.stats().generated_tokens - gen0;
            par_tok_per_s = 1000.0 * double(par_tokens) / par_ms;
            const auto pio = delta(pio0, model->streaming()->stats());
            par_bytes_per_token = double(pio.bytes_read) / double(par_tokens);
            const double par_spine_bytes = psp ? double(psp->stats().bytes_read - psp0.bytes_read) : 0.0;
            // the I/O limit of these passes: every byte they read (experts and streamed spine) at the raw drive rate
            // probed in this run; the ratio says how close the batch comes to being I/O-bound
            const double par_read_bytes = double(pio.device_bytes_read) + par_spine_bytes;
            par_io_limit_tok_per_s = par_read_bytes > 0 ? double(par_tokens) / (par_read_bytes / (raw.gbps * 1e9)) : 0;
            std::fprintf(stderr,
                         "  parallel %lld sequences: %.3f tok/s in all (B = 1: %.3f), %.2f MB of experts read per "
                         "token (B = 1: %.2f)\n",
                         (long long)B, par_tok_per_s, tok_per_s, par_bytes_per_token / 1e6,
                         double(dec.bytes_read) / 1e6 / double(a->tokens));
            if (par_io_limit_tok_per_s > 0)
                std::fprintf(stderr,
                             "  parallel I/O limit %.3f tok/s (%.2f MB read per token, spine included, at the raw %.2f "
                             "GB/s): %.2f of it\n",
                             par_io_limit_tok_per_s, par_read_bytes / 1e6 / double(par_tokens), raw.gbps,
                             par_tok_per_s / par_io_limit_tok_per_s);
        }
        const uint64_t held_hits = c2.held_hits - c1.held_hits;
        if (!lo.streaming.usage_stats_path.empty()) {
            const UsagePinStats& ps = pins;
            std::fprintf(stderr,
                         "  pinned  %llu experts from %s (%s), %llu decode hits on them, %llu released as stale\n",
                         (unsigned long long)ps.pinned_at_load, lo.streaming.usage_stats_path.c_str(),
                         ps.file_used ? "matched" : ps.warning.empty() ? "no file yet" : "ignored",
                         (unsigned long long)held_hits, (unsigned long long)ps.released);
        }
        if (a->json) {
            nlohmann::json j;
            j["tok_per_s"] = tok_per_s;
            j["read_gbps"] = read_gbps;
            j["raw_read_gbps"] = raw.gbps;
            j["raw_read_gbps_before"] = raw_before.gbps;
            j["raw_read_gbps_after"] = raw_after.gbps;
            j["io_efficiency"] = io_efficiency;
            j["raw_spine_read_gbps"] = spine_raw_gbps;
            j["overlap"] = overlap;
            j["hit_rate"] = hit_rate;
            j["bytes_read_per_token"] = double(dec.bytes_read + spine_dec_bytes) / double(a->tokens);
            j["expert_bytes_read_per_token"] = double(dec.bytes_read) / double(a->tokens);
            j["spine_bytes_read_per_token"] = double(spine_dec_bytes) / double(a->tokens);
            j["spine_wait_ms_per_token"] = spine_dec_wait_ms / double(a->tokens);
            j["bytes_read_per_prompt_token"] = double(pre.bytes_read) / double(a->prompt_tokens);
            j["prefill_experts_read"] = pre.experts_read;
            j["prefill_experts_used"] = pre.experts_requested;
            j["peak_rss_bytes"] = rss;
            j["memory_budget_bytes"] = budget;
            j["decode_ms"] = decode_ms;
            j["prefill_ms"] = prefill_ms;
            j["prefill_mapped_read_bytes"] = pre_mapped_bytes;
            j["io_wait_ms_per_token"] = dec.io_wait_ms / double(a->tokens);
            j["matmul_ms_per_token"] = matmul_ms_per_token;
            j["other_ms_per_token"] = other_ms_per_token;
            j["raw_read_p50_ms"] = raw.p50_ms;
            j["backend"] = raw.method;
            j["queue_depth"] = po.queue_depth;
            j["prefetch_issued_per_token"] = double(dec.prefetch_issued) / double(a->tokens);
            j["prefetch_used_per_token"] = double(dec.prefetch_used) / double(a->tokens);
            j["pinned_from_usage_stats"] = pins.pinned_at_load;
            j["pinned_hits"] = held_hits;
            j["pins_released"] = pins.released;
            if (B > 1) {
                j["parallel"] = B;
                j["parallel_tok_per_s"] = par_tok_per_s;
                j["parallel_expert_bytes_read_per_token"] = par_bytes_per_token;
                j["parallel_io_limit_tok_per_s"] = par_io_limit_tok_per_s;
            }
            std::printf("%s\n", j.dump().c_str());
        }
    });
}

}  // namespace sluice::cli
