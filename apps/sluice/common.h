// Small helpers shared by the subcommands: id-list parsing and common flags.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "models/model.h"
#include "runtime/draft_model.h"
#include "runtime/dspark_drafter.h"
#include "runtime/eagle3_drafter.h"
#include "runtime/engine.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace sluice::cli {

// Flags every command that loads a model shares: the folder, threads, the memory budget and expert streaming.
struct ModelArgs {
    std::string model;
    int threads = 0;
    std::string memory;         // budget, e.g. 64G; empty = none
    bool stream = false;        // stream experts even without a budget
    std::string cache_policy = "lru";
    std::string io_backend = "auto";
    unsigned queue_depth = 32;
    int64_t ctx = 4096;         // context tokens in all, shared by the parallel sequences
    int64_t parallel = 1;       // sequences served at once
    bool stats = false;
    bool no_prefetch = false;
    std::string experts_dir;    // packed expert store folder(s), comma-separated
    bool verify_reads = false;
    std::string usage_stats;    // expert usage statistics file: pins the most-used experts, updated at exit
    std::string trace_experts;  // expert trace file (generate, bench: add_trace_arg)
    std::string device = "auto";  // where weight matmuls run: auto (CUDA when a device is usable), cuda, cpu
    std::string gpu_memory;       // device memory the CUDA backend may hold; empty: 90% of what is free

    // Also selects the device (ops::select_backend) and its memory budget: call once, before loading the model.
    LoadOptions to_options() const;
};
void add_model_args(CLI::App* sub, ModelArgs& a);

// Flags of the commands that serve many requests (serve, batch): the prefix cache and speculative drafts.
struct EngineArgs {
    std::string prefix_cache = "auto";  // RAM for reusable prompt states, part of the memory plan; 0: off
    int64_t speculative = 0;            // draft tokens per step for greedy requests (prompt lookup); 0: off
    std::string state_dir;              // the prefix cache's SSD tier; empty: none
    std::string state_dir_size = "10G";
    std::string draft_model;            // drafts from this model instead of prompt lookup (with --speculative)
    std::string draft_memory;           // its share of --memory; empty: a quarter
    std::string draft_gate = "on";      // on: each request drafts only as far as it pays (runtime/draft_gate.h)
    // Sets EngineOptions' prefix cache and state directory fields from these arguments.
    void apply(EngineOptions& eo, uint64_t prefix_cache_bytes) const;
    // auto: an eighth of the memory budget, at most 512 MiB (512 MiB without a budget)
    uint64_t prefix_cache_bytes(uint64_t memory_budget_bytes) const;
};
void add_engine_args(CLI::App* sub, EngineArgs& a);
// --draft-model DIR [--draft-memory SIZE] (generate, serve, batch): plan_draft takes the draft's share out of the
// target's budget before the target loads; load_draft then loads it and checks that it shares the target's tokenizer.
// A DSpark drafter folder (config.json model_type k3_dspark) is detected: it reads the target's hidden states and
// shares its embedding and head, so it takes no share of the budget; load_dspark loads it (load_draft gives null).
// So is an EAGLE-3 drafter folder (architectures Eagle3DeepseekV2ForCausalLM): load_eagle3 loads it.
struct DraftPlan {
    std::string dir;    // empty: no draft model
    LoadOptions load;   // the draft's options (its budget share; the target's reader, policy and sequences)
    bool dspark = false;
    bool eagle3 = false;
    // DSpark and EAGLE-3: what the drafter holds beside the target (hidden_state_drafter_bytes), taken from the
    // target's budget when it has one
    uint64_t drafter_bytes = 0;
};
// A DSpark or EAGLE-3 drafter's memory: its weights (read from its memory map at every draft; an EAGLE-3 copy of
// the target's embedding is never read and not counted), for `sequences` sequences of `context_tokens` +
// `speculative` rows its MLA context caches (f32 latent and RoPE key per layer) and the target's hidden-state taps it
// reads (f32, one row per tapped layer), and its logits for a block of drafts.
uint64_t hidden_state_drafter_bytes(const std::string& dir, int64_t context_tokens, int64_t sequences,
                                    int64_t speculative);
// load_model, and when the budget is too small with a drafter's bytes reserved from it, the error says so.
std::unique_ptr<Model> load_target(const std::string& dir, const LoadOptions& options, const DraftPlan& plan);
// A draft model's cost per drafted token for the speculative gate, in the target's drive bytes (one decode pass:
// the spine and top-k experts per MoE layer, RAM-held bytes weighed as runtime/draft_gate.h says).
double pass_bytes_per_token(const Model& draft, const Model& target);

DraftPlan plan_draft(LoadOptions& target, const std::string& draft_dir, const std::string& draft_memory,
                     int64_t speculative);
std::unique_ptr<DraftModel> load_draft(const DraftPlan& plan, const Model& target, const std::string& target_dir,
                                       int64_t prefill_chunk);
// The DSpark drafter when plan.dspark (turns on the target's hidden-state taps), else null.
std::unique_ptr<DSparkDrafter> load_dspark(const DraftPlan& plan, Model& target);
// The EAGLE-3 drafter when plan.eagle3 (turns on the target's hidden-state taps), else null.
std::unique_ptr<Eagle3Drafter> load_eagle3(const DraftPlan& plan, Model& target);

// A model loaded to answer many requests (serve, batch) in passes of batch_rows rows: the target with its prefix
// cache and state snapshots planned, its draft model, DSpark or EAGLE-3 drafter (--draft-model), and the engine's
// options.
struct ServingModel {
    std::unique_ptr<Model> model;
    std::unique_ptr<DraftModel> draft;
    std::unique_ptr<DSparkDrafter> dspark;
    std::unique_ptr<Eagle3Drafter> eagle3;
    EngineOptions engine;
};
ServingModel load_serving_model(const ModelArgs& m, const EngineArgs& e, int64_t batch_rows);

// --trace-experts FILE (generate, bench): record every MoE layer's routing, cache hits and read-aheads.
void add_trace_arg(CLI::App* sub, ModelArgs& a);
// The residency plan and what it implies: cold bytes a token reads, bytes per token with the expert cache and with
// batches of rows (distinct experts per layer for B rows = E(1 - (1 - k/E)^B)), and the tokens/s a drive allows.
void print_plan(const Model& model, double drive_gbps, FILE* out);

// The --stats report: bytes read, hit rate, GB/s, I/O wait vs compute, and the residency plan.
void print_stats(const Model& model, double total_ms, int64_t tokens, FILE* out);
// One line on experts pinned from --usage-stats (nothing when no file was given).
void print_pin_stats(const StreamingExpertSource& s, FILE* out);

// The text side of a model folder for the commands that answer requests (serve, batch): its tokenizer (required;
// the error names the command) and its chat template, null when the folder has none (template_error says why).
struct TextSide {
    std::unique_ptr<tok::Tokenizer> tokenizer;
    std::unique_ptr<ChatTemplate> chat_template;
    std::string template_error;
};
TextSide load_text_side(const std::string& model_dir, const char* command);

// The name a model answers to by default: its folder's name ("model/", "./model" and "." resolved).
std::string model_id_from_folder(const std::string& model_dir);

// Bytes in decimal units for reports: "512 B", "1.50 GB".
std::string human_bytes(uint64_t bytes);

// "5,17,3" or "[5, 17, 3]" (the JSON array `sluice tokenize` prints) -> {5, 17, 3}; errors name the offending item.
std::vector<int32_t> parse_ids(const std::string& text);

// Number checks for options, with plain messages ("must be >= 0, got -3"; CLI11's own print its range's limits as
// 300-digit numbers). NaN fails both.
CLI::Validator non_negative();
CLI::Validator positive();

}  // namespace sluice::cli
