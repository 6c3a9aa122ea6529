// sluice plan (-m DIR | --like NAME) --memory SIZE --drives 7GB/s[,...] [--rates FILE] [--device cpu|cuda]
// [--gpu-memory SIZE --link RATE]
// [--threads N] [--usage-stats FILE] [--json]: the engine's memory plan for that budget, the bytes a token reads and
// projected decode, prefill and batch throughput (src/plan/; the arithmetic is described in plan/projection.h).
#include <cmath>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "common.h"
#include "core/error.h"
#include "experts/residency.h"
#include "experts/expert_trace.h"
#include "experts/usage_stats.h"
#include "formats/checkpoint.h"
#include "plan/projection.h"

namespace sluice::cli {

namespace {

struct PlanArgs {
    std::string model, like, memory, drives, device = "cpu", rates, usage_stats, batch_sizes = "1,4,16,64,256";
    std::string trace, cache_policy = "lru", timing = "pipeline", gpu_memory, link;
    int64_t threads = 0, ctx = 4096, parallel = 1, prefill_chunk = 256, pass_rows = 0;
    double token_overhead_ms = 0;
    bool json = false, overlap = false;
};

std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> out;
    size_t i = 0;
    while (i <= s.size()) {
        size_t j = s.find(',', i);
        if (j == std::string::npos) j = s.size();
        out.push_back(s.substr(i, j - i));
        i = j + 1;
    }
    return out;
}

std::vector<double> usage_shares(const std::string& path, const ModelShape& m) {
    const UsageStats u = read_usage_stats(path);
    std::vector<double> shares;
    int64_t layers = 0;
    for (const auto& row : u.counts) {
        if (row.empty()) continue;
        SLUICE_CHECK(int64_t(row.size()) == m.n_experts, "--usage-stats ", path, ": ", row.size(),
                     " experts per layer, the model has ", m.n_experts);
        double total = 0;
        for (uint64_t c : row) total += double(c);
        ++layers;
        for (uint64_t c : row) shares.push_back(total > 0 ? double(c) / total : 1.0 / double(row.size()));
    }
    SLUICE_CHECK(layers == m.n_moe_layers, "--usage-stats ", path, ": counts for ", layers, " MoE layers, the model has ",
                 m.n_moe_layers);
    return shares;
}

void run_plan(const PlanArgs& a) {
    PlanMachine mc;
    try {
        mc.memory_bytes = parse_size(a.memory);
    } catch (const Error& e) {
        fail("--memory: ", e.what());
    }
    SLUICE_CHECK(mc.memory_bytes > 0, "--memory: the budget must be > 0");
    for (const std::string& d : split(a.drives)) mc.drives_gbps.push_back(parse_drive_rate(d));
    mc.device = a.device;
    mc.threads = a.threads;
    if (!a.gpu_memory.empty()) {
        try {
            mc.gpu_memory_bytes = parse_size(a.gpu_memory);
        } catch (const Error& e) {
            fail("--gpu-memory: ", e.what());
        }
        SLUICE_CHECK(mc.gpu_memory_bytes > 0, "--gpu-memory: the budget must be > 0");
    }
    if (!a.link.empty()) mc.link_gbps = parse_drive_rate(a.link, "--link");  // the pairing: project() checks it
    if (!a.rates.empty()) mc.rates = load_rates(a.rates);
    PlanSettings s{.ctx = a.ctx, .parallel = a.parallel, .prefill_chunk = a.prefill_chunk, .pass_rows = a.pass_rows,
                   .batch_sizes = {}, .timing = a.overlap ? "overlap" : a.timing, .cache_policy = a.cache_policy,
                   .token_overhead_ms = a.token_overhead_ms};
    for (const std::string& b : split(a.batch_sizes)) {
        size_t used = 0;
        long long v = 0;
        try {
            v = std::stoll(b, &used);
        } catch (...) {
            used = 0;
        }
        SLUICE_CHECK(used == b.size() && !b.empty() && v > 0 && v <= (1 << 20), "--batch-sizes: '", b,
                     "' is not a positive integer");
        s.batch_sizes.push_back(v);
    }
    const ModelShape m = a.model.empty() ? shape_from_published(a.like) : shape_from_folder(a.model);
    if (!a.usage_stats.empty()) s.usage_share = usage_shares(a.usage_stats, m);
    ExpertTrace trace;
    if (!a.trace.empty()) {
        trace = read_expert_trace(a.trace);  // Error naming the file when it is not a whole trace
        check_trace_shape(trace, a.trace, m);
        if (!a.model.empty()) {
            const ModelFingerprint f = model_fingerprint(Checkpoint(a.model), 0, 0, 0);
            check_trace_model(trace, a.trace, f.config_hash, f.weights_hash, m.n_experts);
        }
        s.trace = &trace;
    }
    const Projection p = project(m, mc, s);
    if (a.json)
        std::printf("%s\n", projection_json(m, mc, s, p).c_str());
    else
        std::printf("%s", projection_text(m, mc, s, p).c_str());
}

}  // namespace

void register_plan(CLI::App& app) {
    auto a = std::make_shared<PlanArgs>();
    auto* sub = app.add_subcommand("plan", "Memory plan and projected tok/s of a model on a machine described by flags");
    sub->footer(
        "Example: sluice plan --like kimi-k3 --memory 64G --drives 7GB/s,7GB/s --rates rates.json\n"
        "The memory plan is the engine's (spine, state, staging, expert cache). Hit rates come from the cache policy\n"
        "run over uniform routing, the counts of --usage-stats, or the routing --trace recorded. Times come from the\n"
        "kernel and drive rates in --rates (sluice bench --save-rates FILE); the drives' rates are --drives'.");
    auto* model = sub->add_option("-m,--model", a->model, "model folder (Hugging Face layout)");
    auto* like = sub->add_option("--like", a->like,
                                 "a published model instead of a folder: kimi-k3, kimi-k2, deepseek-v3, kimi-linear, "
                                 "qwen3-moe, mixtral, gpt-oss");
    model->excludes(like);
    sub->add_option("--memory", a->memory, "memory budget of the machine (e.g. 64G)")->required();
    sub->add_option("--drives", a->drives, "each drive's read rate, comma-separated (e.g. 7GB/s,7GB/s)")->required();
    sub->add_option("--device", a->device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
    sub->add_option("--gpu-memory", a->gpu_memory,
                    "with --device cuda: the card's memory budget (as the engine's --gpu-memory); plans what the CUDA "
                    "backend keeps on the card and the bytes each pass copies to it");
    sub->add_option("--link", a->link, "with --gpu-memory: the host-to-device copy rate (e.g. 25GB/s)");
    sub->add_option("-t,--threads", a->threads, "compute threads (kernel rates scale from the measured threads)")
        ->check(non_negative());
    sub->add_option("--rates", a->rates, "measured rates: a file sluice bench --save-rates wrote");
    sub->add_option("--usage-stats", a->usage_stats, "expert usage counts (--usage-stats of generate/serve) for the "
                                                      "hit rate instead of uniform routing");
    sub->add_option("--ctx", a->ctx, "context tokens reserved in the memory plan")->check(positive())->capture_default_str();
    sub->add_option("--parallel", a->parallel, "sequences served at once (state reserve)")->check(positive())
        ->capture_default_str();
    sub->add_option("--prefill-chunk", a->prefill_chunk, "prompt tokens per prefill pass")->check(positive())
        ->capture_default_str();
    sub->add_option("--pass-rows", a->pass_rows,
                    "rows of the largest forward pass the engine will run (its --chunk / --batch-rows): their "
                    "activations are reserved (default: the largest of --prefill-chunk and --batch-sizes)")
        ->check(CLI::NonNegativeNumber);
    sub->add_option("--batch-sizes", a->batch_sizes, "decode batch sizes to project")->capture_default_str();
    sub->add_option("--trace", a->trace,
                    "routing the engine recorded on this model (--trace-experts of generate/bench): decode's hit rate "
                    "is its replay through the cache");
    sub->add_option("--cache-policy", a->cache_policy, "the engine's --cache-policy, simulated for the hit rates")
        ->check(CLI::IsMember({"lru", "lfu", "next-use", "markov"}))
        ->capture_default_str();
    sub->add_option("--timing", a->timing,
                    "time of a pass: pipeline (reads overlapped with compute as the engine does), overlap "
                    "(max(I/O, compute)) or serial (their sum)")
        ->check(CLI::IsMember({"pipeline", "overlap", "serial"}))
        ->capture_default_str();
    sub->add_flag("--overlap", a->overlap, "the same as --timing overlap");
    sub->add_option("--token-overhead-ms", a->token_overhead_ms,
                    "compute per row outside the weight matmuls (norms, attention, routing, sampling, the engine), "
                    "as sluice bench reports it for this model (\"the rest\"); added to every timed pass")
        ->capture_default_str();
    sub->add_flag("--json", a->json, "one JSON object on stdout");
    sub->callback([a] {
        if (a->model.empty() == a->like.empty())
            throw CLI::ValidationError("plan", "give a model folder (-m DIR) or a published model (--like NAME)");
        run_plan(*a);
    });
}

}  // namespace sluice::cli
