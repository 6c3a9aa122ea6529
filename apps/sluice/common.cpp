#include "common.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "experts/packed_store.h"
#include "experts/residency.h"
#include "formats/checkpoint.h"
#include "formats/hf_config.h"
#include "ops/cuda/backend.h"
#include "ops/ops.h"
#include "runtime/draft_gate.h"

namespace sluice::cli {

std::vector<int32_t> parse_ids(const std::string& text_in) {
    std::string text = text_in;
    const size_t first = text.find_first_not_of(" \t\r\n"), last = text.find_last_not_of(" \t\r\n");
    text = first == std::string::npos ? std::string() : text.substr(first, last - first + 1);
    if (!text.empty() && text.front() == '[') {  // a JSON array, as `sluice tokenize` prints
        SLUICE_CHECK(text.back() == ']', "--ids: '[' without a closing ']'");
        text = text.substr(1, text.size() - 2);
    }
    std::vector<int32_t> ids;
    size_t i = 0;
    int item = 0;
    while (i <= text.size()) {
        size_t j = text.find(',', i);
        if (j == std::string::npos) j = text.size();
        std::string tok = text.substr(i, j - i);
        while (!tok.empty() && std::isspace(static_cast<unsigned char>(tok.front()))) tok.erase(tok.begin());
        while (!tok.empty() && std::isspace(static_cast<unsigned char>(tok.back()))) tok.pop_back();
        SLUICE_CHECK(!tok.empty(), "--ids: item ", item, " is empty (expected comma-separated integers like 5,17,3)");
        size_t used = 0;
        long long v = 0;
        try {
            v = std::stoll(tok, &used);
        } catch (...) {
            used = 0;
        }
        SLUICE_CHECK(used == tok.size(), "--ids: item ", item, " ('", tok, "') is not an integer");
        SLUICE_CHECK(v >= 0 && v <= INT32_MAX, "--ids: item ", item, " (", v, ") is out of range");
        ids.push_back(int32_t(v));
        ++item;
        i = j + 1;
    }
    return ids;
}

namespace {
CLI::Validator number_check(const char* name, bool strict) {
    return CLI::Validator(
        [strict](std::string& v) -> std::string {
            double d = 0;
            size_t used = 0;
            try {
                d = std::stod(v, &used);
            } catch (...) {
                used = 0;
            }
            if (used != v.size() || v.empty()) return "'" + v + "' is not a number";
            if (std::isnan(d) || (strict ? !(d > 0) : !(d >= 0)))
                return std::string(strict ? "must be > 0" : "must be >= 0") + ", got " + v;
            return {};
        },
        name);
}
}  // namespace

CLI::Validator non_negative() { return number_check(">= 0", false); }
CLI::Validator positive() { return number_check("> 0", true); }

void add_model_args(CLI::App* sub, ModelArgs& a) {
    sub->add_option("-m,--model", a.model, "model folder (Hugging Face layout)")->required();
    sub->add_option("-t,--threads", a.threads, "worker threads (0 = all cores)")->check(non_negative());
    sub->add_option("--memory", a.memory,
                    "memory budget for everything (e.g. 48G; default 80% of available memory; 0: no budget, weights "
                    "served from the memory map); what does not fit streams from SSD");
    sub->add_flag("--stream", a.stream, "stream routed experts from SSD even without a budget");
    sub->add_option("--cache-policy", a.cache_policy, "expert cache policy: lru, lfu, next-use, markov (docs/routing.md)")->capture_default_str();
    sub->add_option("--io", a.io_backend, "read backend: auto, uring, pread, buffered")->capture_default_str();
    sub->add_option("--qd", a.queue_depth, "reads in flight")->check(positive())->capture_default_str();
    sub->add_option("--ctx", a.ctx,
                    "context tokens reserved in the memory plan, in all: shared by the --parallel sequences (like "
                    "llama.cpp's -c with -np)")
        ->check(positive())
        ->capture_default_str();
    sub->add_option("--parallel", a.parallel,
                    "sequences served at once (server, batch jobs); the memory plan reserves state for them")
        ->check(positive())
        ->capture_default_str();
    sub->add_flag("--stats", a.stats, "print I/O and cache statistics to stderr");
    sub->add_flag("--no-prefetch", a.no_prefetch, "do not read ahead: neither the next layer's likely experts nor the next resident layers' spine matrices (their first reads)");
    sub->add_option("--experts-dir", a.experts_dir,
                    "read routed experts from a packed store (sluice pack): its folder, then any data folders, "
                    "comma-separated");
    sub->add_flag("--verify-reads", a.verify_reads, "check each packed expert's checksum as it is read");
    sub->add_option("--usage-stats", a.usage_stats,
                    "expert usage statistics file: its most-used experts are preloaded and pinned in the cache "
                    "(a file for another model, or a damaged one, is ignored with a warning); this run's use is "
                    "merged into it at exit");
    sub->add_option("--device", a.device,
                    "where weight matmuls and attention run: auto (CUDA when a usable GPU is present), cuda, "
                    "cpu; norms, routing and the KDA recurrence stay on the CPU for now")
        ->check(CLI::IsMember({"auto", "cuda", "cpu"}))
        ->capture_default_str();
    sub->add_option("--gpu-memory", a.gpu_memory,
                    "device memory the CUDA backend may hold for weight copies and work buffers (e.g. 40G; default "
                    "90% of what is free)");
}

void add_engine_args(CLI::App* sub, EngineArgs& a) {
    sub->add_option("--prefix-cache", a.prefix_cache,
                    "RAM kept for finished prompts' states, so a request that starts with tokens an earlier one ran "
                    "(the next chat turn, shared instructions) computes only the rest; part of --memory; 0: off; "
                    "auto: an eighth of --memory, at most 512M")
        ->capture_default_str();
    sub->add_option("--state-dir", a.state_dir,
                    "keep prompt states also as files in DIR (the prefix cache's SSD tier): reused after RAM evicts "
                    "them and after restarts; bad or foreign files are skipped")
        ->check(CLI::NonexistentPath | CLI::ExistingDirectory);
    sub->add_option("--state-dir-size", a.state_dir_size, "most bytes of state files in --state-dir (oldest go)")
        ->capture_default_str();
    sub->add_option("--speculative", a.speculative,
                    "requests draft this many tokens per step (prompt lookup, or --draft-model) and verify them in the "
                    "same pass (greedy: same output; sampled: same distribution; a request turns it off with "
                    "\"speculative\": false); 0: off")
        ->check(non_negative())
        ->capture_default_str();
    sub->add_option("--draft-model", a.draft_model,
                    "draft with this model (same tokenizer, checked at load) instead of prompt lookup; each request "
                    "gets its own draft state; needs --speculative N");
    sub->add_option("--draft-memory", a.draft_memory,
                    "the draft model's share of --memory (default: a quarter); the target gets the rest");
    sub->add_option("--draft-gate", a.draft_gate,
                    "on: each request verifies only as many drafts (up to --speculative) as its own acceptance and "
                    "the bytes a pass reads say pay, none while none do (probing again later), and a DSpark drafter's "
                    "confidence head cuts each block to the drafts that pay; off: always N")
        ->check(CLI::IsMember({"on", "off"}))
        ->capture_default_str();
}

double pass_bytes_per_token(const Model& draft, const Model& target) {
    return draft_pass_bytes(draft, ram_byte_weight(target));
}

namespace {
// A DSpark or EAGLE-3 drafter's bytes come out of the target's budget (none to take from under --memory 0).
void reserve_for_drafter(LoadOptions& target, DraftPlan& plan, int64_t speculative) {
    plan.drafter_bytes =
        hidden_state_drafter_bytes(plan.dir, target.max_context_tokens, target.max_sequences, speculative);
    if (target.memory_budget_bytes == 0) return;
    SLUICE_CHECK(target.memory_budget_bytes > plan.drafter_bytes, "--memory ", format_bytes(target.memory_budget_bytes),
                 " does not even hold the drafter ", plan.dir, ": ", format_bytes(plan.drafter_bytes),
                 " (its weights, context caches and taps) before the target");
    target.memory_budget_bytes -= plan.drafter_bytes;
}
}  // namespace

uint64_t hidden_state_drafter_bytes(const std::string& dir, int64_t context_tokens, int64_t sequences,
                                    int64_t speculative) {
    const Checkpoint ck(dir);
    uint64_t weights = 0;
    for (const std::string& name : ck.names())
        if (name != "embed_tokens.weight") weights += ck.get(name).nbytes();
    const JsonObject cfg = JsonObject::load_file(dir + "/config.json");
    const std::string where = dir + "/config.json";
    const int64_t layers = cfg.get_int("num_hidden_layers", 1);
    const int64_t row_floats = cfg.get_int("kv_lora_rank", 0) + cfg.get_int("qk_rope_head_dim", 0);
    SLUICE_CHECK(layers > 0 && row_floats > 0, where, ": num_hidden_layers, kv_lora_rank and qk_rope_head_dim must "
                 "be positive to plan the drafter's caches");
    // each sequence's cache pages hold 64 rows (state/caches.h, PagedRows)
    const int64_t rows = (context_tokens + speculative + 63) / 64 * 64;
    const uint64_t caches = uint64_t(sequences) * uint64_t(rows) * uint64_t(layers) * uint64_t(row_floats) * 4;
    // the target's hidden-state taps the drafter reads, one row of each tapped layer per token (SequenceState::taps)
    int64_t taps = 0;
    if (cfg.has("target_layer_ids")) {
        taps = int64_t(cfg.get_int_list("target_layer_ids").size());
    } else if (const auto e = cfg.get_object("eagle_config"); e && e->has("eagle_aux_hidden_state_layer_ids")) {
        taps = int64_t(e->get_int_list("eagle_aux_hidden_state_layer_ids").size());
    } else {
        taps = cfg.get_int("num_aux_hidden_states", 0);
    }
    const int64_t tap_width = cfg.get_int("target_hidden_size", cfg.get_int("hidden_size", 0));
    const uint64_t tap_rows = uint64_t(sequences) * uint64_t(rows) * uint64_t(std::max<int64_t>(0, taps)) *
                              uint64_t(std::max<int64_t>(0, tap_width)) * 4;
    const uint64_t logits = uint64_t(speculative + 1) * uint64_t(cfg.get_int("vocab_size", 0)) * 4 * 2;
    return weights + caches + tap_rows + logits;
}

std::unique_ptr<Model> load_target(const std::string& dir, const LoadOptions& options, const DraftPlan& plan) {
    try {
        return load_model(dir, options);
    } catch (const Error& e) {
        if (plan.drafter_bytes == 0 || std::string(e.what()).find("minimum") == std::string::npos) throw;
        throw Error(cat(e.what(), "; ", format_bytes(plan.drafter_bytes), " of --memory is reserved for the drafter ",
                        plan.dir, " (its weights, context caches and taps), so --memory must be that much more"));
    }
}

DraftPlan plan_draft(LoadOptions& target, const std::string& draft_dir, const std::string& draft_memory,
                     int64_t speculative) {
    SLUICE_CHECK(draft_dir.empty() || speculative > 0, "--draft-model needs --speculative N (N >= 1)");
    SLUICE_CHECK(draft_memory.empty() || !draft_dir.empty(), "--draft-memory needs --draft-model");
    DraftPlan plan{draft_dir, target};
    if (draft_dir.empty()) return plan;
    check_model_folder(draft_dir);
    if (is_dspark_checkpoint(draft_dir)) {
        SLUICE_CHECK(draft_memory.empty(), "--draft-memory: ", draft_dir,
                     " is a DSpark drafter, which shares the target's memory map and takes no share of the budget");
        plan.dspark = true;
        reserve_for_drafter(target, plan, speculative);
        return plan;
    }
    if (is_eagle3_checkpoint(draft_dir)) {
        SLUICE_CHECK(draft_memory.empty(), "--draft-memory: ", draft_dir,
                     " is an EAGLE-3 drafter, which reads the target's hidden states and takes no share of the budget");
        plan.eagle3 = true;
        reserve_for_drafter(target, plan, speculative);
        return plan;
    }
    const MemorySplit split =
        split_memory_budget(target.memory_budget_bytes, draft_memory.empty() ? 0 : parse_size(draft_memory));
    target.memory_budget_bytes = split.target_bytes;
    plan.load.memory_budget_bytes = split.draft_bytes;
    // the same reader, cache policy and prefetch; the packed store, usage statistics and trace are the target's own
    StreamingOptions ds;
    ds.policy = target.streaming.policy;
    ds.prefetch = target.streaming.prefetch;
    ds.reader = target.streaming.reader;
    ds.staging_experts = target.streaming.staging_experts;
    plan.load.streaming = ds;
    plan.load.prefix_cache_bytes = 0;
    plan.load.max_context_tokens += speculative * target.max_sequences;  // drafts run past the verified context
    return plan;
}

std::unique_ptr<DSparkDrafter> load_dspark(const DraftPlan& plan, Model& target) {
    if (plan.dir.empty() || !plan.dspark) return nullptr;
    return std::make_unique<DSparkDrafter>(plan.dir, target, plan.load.n_threads);
}

std::unique_ptr<Eagle3Drafter> load_eagle3(const DraftPlan& plan, Model& target) {
    if (plan.dir.empty() || !plan.eagle3) return nullptr;
    return std::make_unique<Eagle3Drafter>(plan.dir, target, plan.load.n_threads);
}

std::unique_ptr<DraftModel> load_draft(const DraftPlan& plan, const Model& target, const std::string& target_dir,
                                       int64_t prefill_chunk) {
    if (plan.dir.empty() || plan.dspark || plan.eagle3) return nullptr;
    std::unique_ptr<Model> dm;
    try {
        dm = load_model(plan.dir, plan.load);
    } catch (const Error& e) {
        if (plan.load.memory_budget_bytes == 0) throw;
        fail("draft model ", plan.dir, ", in its share of the budget (--draft-memory, default a quarter of --memory): ",
             e.what());
    }
    check_draft_compatible(target.info(), target_dir, dm->info(), plan.dir);
    return std::make_unique<DraftModel>(std::move(dm), prefill_chunk);
}

ServingModel load_serving_model(const ModelArgs& m, const EngineArgs& e, int64_t batch_rows) {
    LoadOptions lo = m.to_options();
    lo.max_pass_rows = batch_rows;  // the engine's max_batch_rows
    lo.prefix_cache_bytes = e.prefix_cache_bytes(lo.memory_budget_bytes);
    // recurrent state snapshots within a pass (prefix cache, speculation): reserved in the plan
    if (lo.prefix_cache_bytes > 0 || !e.state_dir.empty() || e.speculative > 0) lo.snapshot_rows = batch_rows;
    const DraftPlan draft_plan = plan_draft(lo, e.draft_model, e.draft_memory, e.speculative);
    ServingModel s;
    s.model = load_target(m.model, lo, draft_plan);
    s.draft = load_draft(draft_plan, *s.model, m.model, batch_rows);
    s.dspark = load_dspark(draft_plan, *s.model);
    if (s.dspark) s.dspark->set_confidence_cut(e.draft_gate == "on");  // the gate's per-block part
    s.eagle3 = load_eagle3(draft_plan, *s.model);
    s.engine.max_batch_rows = batch_rows;
    s.engine.max_sequences = m.parallel;
    s.engine.max_context_tokens = m.ctx;
    e.apply(s.engine, lo.prefix_cache_bytes);
    return s;
}

void EngineArgs::apply(EngineOptions& eo, uint64_t prefix_cache_bytes) const {
    eo.prefix_cache_bytes = prefix_cache_bytes;
    eo.state_dir = state_dir;
    try {
        eo.state_dir_bytes = parse_size(state_dir_size);
    } catch (const Error& e) {
        throw Error(cat("--state-dir-size: ", e.what()));
    }
}

uint64_t EngineArgs::prefix_cache_bytes(uint64_t memory_budget_bytes) const {
    const uint64_t cap = uint64_t(512) << 20;
    if (prefix_cache == "auto") return memory_budget_bytes > 0 ? std::min(cap, memory_budget_bytes / 8) : cap;
    try {
        return parse_size(prefix_cache);
    } catch (const Error& e) {
        throw Error(cat("--prefix-cache: ", e.what()));
    }
}

void add_trace_arg(CLI::App* sub, ModelArgs& a) {
    sub->add_option("--trace-experts", a.trace_experts,
                    "write each MoE layer's routed experts per row, cache hits and look-ahead reads to FILE "
                    "(binary; docs/routing.md; tools/routing/analyze_trace.py reads it); needs streamed experts "
                    "(--memory SIZE or --stream)");
}

LoadOptions ModelArgs::to_options() const {
    LoadOptions o;
    o.n_threads = threads;
    o.stream_experts = stream;
    o.streaming.policy = cache_policy;
    o.streaming.prefetch = !no_prefetch;
    o.streaming.reader.backend = io::parse_backend(io_backend);
    o.streaming.reader.queue_depth = queue_depth;
    o.max_context_tokens = ctx;
    o.max_sequences = parallel;
    if (!memory.empty()) {
        o.memory_budget_bytes = parse_size(memory);
    } else {
        // No --memory: a model whose files fit comfortably in 80% of available memory is served from the memory
        // map; a larger one gets that share as its budget and streams the rest.
        uint64_t model_bytes = 0;
        std::error_code ec;
        for (const auto& e : std::filesystem::directory_iterator(model, ec))
            if (e.path().extension() == ".safetensors") model_bytes += e.file_size(ec);
        const uint64_t budget = default_memory_budget();
        if (model_bytes + (uint64_t(1) << 30) > budget) o.memory_budget_bytes = budget;
    }
    o.streaming.experts_dirs = split_dir_list(experts_dir);
    SLUICE_CHECK(!verify_reads || !o.streaming.experts_dirs.empty(), "--verify-reads needs --experts-dir");
    o.streaming.verify_reads = verify_reads;
    o.streaming.usage_stats_path = usage_stats;
    o.streaming.trace_path = trace_experts;
    if (ops::select_backend(device) == ops::Backend::Cuda && !gpu_memory.empty())
        cuda::set_memory_budget(parse_size(gpu_memory));
    SLUICE_CHECK(gpu_memory.empty() || device != "cpu", "--gpu-memory needs --device cuda or auto");
    return o;
}

void print_plan(const Model& model, double drive_gbps, FILE* out) {
    const ModelInfo& i = model.info();
    const ResidencyPlan* plan = model.residency();
    if (plan) std::fprintf(out, "%s", plan->describe().c_str());
    if (i.n_routed_experts == 0 || i.expert_bytes == 0) {
        std::fprintf(out, "no routed experts: everything is spine\n");
        return;
    }
    const double E = double(i.n_routed_experts), k = double(i.num_experts_per_tok), L = double(i.n_moe_layers);
    const double cache_fraction =
        model.streaming() ? std::min(1.0, double(model.streaming()->cache().allocated_bytes()) /
                                              double(std::max<uint64_t>(1, i.routed_expert_bytes_total)))
                          : 1.0;
    std::fprintf(out, "experts: %s each, %lld of %lld per layer per token, %lld MoE layers; cache holds %.1f%% of them\n",
                 format_bytes(i.expert_bytes).c_str(), (long long)k, (long long)E, (long long)L, 100 * cache_fraction);
    std::fprintf(out, "%8s %16s %18s %18s%s\n", "rows", "experts/layer", "MB/token cold", "MB/token cached",
                 drive_gbps > 0 ? "   tok/s at drive" : "");
    for (int rows : {1, 8, 32, 128, 512}) {
        const double distinct = E * (1.0 - std::pow(1.0 - k / E, double(rows)));
        // a streamed spine is read once per forward pass, shared by its rows
        const double spine = plan ? double(plan->spine_streamed_bytes) / double(rows) : 0.0;
        const double cold = distinct * L * double(i.expert_bytes) / double(rows) + spine;
        // with a cache holding a fraction f of experts and roughly uniform routing, a fraction f of reads hit
        const double cached = (cold - spine) * (1.0 - cache_fraction) + spine;
        std::fprintf(out, "%8d %16.1f %18.2f %18.2f", rows, distinct, cold / 1e6, cached / 1e6);
        if (drive_gbps > 0) std::fprintf(out, "   %14.2f", cached > 0 ? drive_gbps * 1e9 / cached : INFINITY);
        std::fprintf(out, "\n");
    }
}

void print_stats(const Model& model, double total_ms, int64_t tokens, FILE* out) {
    if (ops::backend() == ops::Backend::Cuda) {
        const auto d = cuda::device_info();
        const auto g = cuda::stats();
        std::fprintf(out,
                     "device: cuda (%s): %llu weight matmuls, %.1f ms in them; %llu attention calls, %.1f ms (keys "
                     "and values up %s); up %s (weights %s), down %s; device copies of weights %llu reused, %llu made, "
                     "%s held of %s\n",
                     d.name.c_str(), (unsigned long long)g.calls, g.busy_ms, (unsigned long long)g.attention_calls,
                     g.attention_ms, format_bytes(g.attention_kv_bytes).c_str(), format_bytes(g.h2d_bytes).c_str(),
                     format_bytes(g.weight_upload_bytes).c_str(), format_bytes(g.d2h_bytes).c_str(),
                     (unsigned long long)g.weight_hits, (unsigned long long)g.weight_misses,
                     format_bytes(g.resident_weight_bytes).c_str(), format_bytes(cuda::memory_budget()).c_str());
    }
    if (const ResidencyPlan* p = model.residency()) std::fprintf(out, "%s", p->describe().c_str());
    if (const SpineStreamer* sp = model.spine_streamer())
        std::fprintf(out, "spine: layers %lld+ streamed: %llu layer reads, %s, waited %.1f ms\n",
                     (long long)sp->first_streamed(), (unsigned long long)sp->stats().layers_read,
                     format_bytes(sp->stats().bytes_read).c_str(), sp->stats().wait_ms);
    const StreamingExpertSource* s = model.streaming();
    if (!s) {
        std::fprintf(out, "experts: resident (memory-mapped); %lld tokens in %.1f ms\n", (long long)tokens, total_ms);
        return;
    }
    const auto& st = s->stats();
    const auto cs = s->cache().total_stats();
    const double lookups = double(cs.hits + cs.misses);
    const double read_s = st.io_wait_ms / 1000.0;
    std::fprintf(out,
                 "experts: %s reads (%s), cache %s in %zu slots (%s)\n"
                 "  requested %llu, read %llu (%llu ahead, %llu of them used), hit rate %.1f%%, bytes read %s (%.2f MB per token)\n"
                 "  fetch %.1f ms of %.1f ms total; waiting on I/O %.1f ms, computing %.1f ms; %.2f GB/s while waiting\n",
                 io::backend_name(s->reader().backend()), s->reader().direct() ? "O_DIRECT" : "buffered",
                 format_bytes(s->cache().allocated_bytes()).c_str(), s->cache().n_slots(), s->cache().policy_name().c_str(),
                 (unsigned long long)st.experts_requested, (unsigned long long)st.experts_read,
                 (unsigned long long)st.prefetch_issued, (unsigned long long)st.prefetch_used, lookups > 0 ? 100.0 * double(cs.hits) / lookups : 0.0, format_bytes(st.bytes_read).c_str(),
                 tokens > 0 ? double(st.bytes_read) / 1e6 / double(tokens) : 0.0, st.fetch_ms, total_ms, st.io_wait_ms,
                 total_ms - st.io_wait_ms, read_s > 0 ? double(st.device_bytes_read) / 1e9 / read_s : 0.0);
    print_pin_stats(*s, out);
}

void print_pin_stats(const StreamingExpertSource& s, FILE* out) {
    if (s.options().usage_stats_path.empty()) return;
    const UsagePinStats& p = s.pin_stats();
    const auto cs = s.cache().total_stats();
    std::fprintf(out,
                 "  pinned from usage stats: %llu experts (%s, %s read at load), %llu pinned hits, "
                 "%llu released as stale, %zu still pinned\n",
                 (unsigned long long)p.pinned_at_load,
                 p.file_used ? "file matched" : p.warning.empty() ? "no file yet" : "file ignored",
                 format_bytes(p.preload_bytes).c_str(), (unsigned long long)cs.held_hits,
                 (unsigned long long)p.released, s.cache().n_held());
}

std::string human_bytes(uint64_t bytes) {
    const char* units[] = {"B", "KB", "MB", "GB", "TB"};
    double v = double(bytes);
    int u = 0;
    while (v >= 1000 && u < 4) {
        v /= 1000;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", v, units[u]);
    return buf;
}

TextSide load_text_side(const std::string& model_dir, const char* command) {
    namespace fs = std::filesystem;
    const fs::path dir(model_dir);
    SLUICE_CHECK(fs::exists(dir / "tokenizer.json") || fs::exists(dir / "tiktoken.model"), model_dir, ": ", command,
                 " needs tokenizer.json or tiktoken.model in the model folder");
    TextSide t;
    t.tokenizer = tok::load_tokenizer(model_dir);
    try {
        t.chat_template = std::make_unique<ChatTemplate>(ChatTemplate::from_model_dir(dir));
    } catch (const Error& e) {
        t.template_error = e.what();
    }
    return t;
}

std::string model_id_from_folder(const std::string& model_dir) {
    namespace fs = std::filesystem;
    const fs::path p = fs::absolute(fs::path(model_dir)).lexically_normal();
    // "model/" normalises to ".../model/" whose filename() is empty: the name is then the parent's
    return p.has_filename() ? p.filename().string() : p.parent_path().filename().string();
}

}  // namespace sluice::cli
