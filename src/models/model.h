// The model interface every architecture implements, and the loader that picks one from config.json.
// forward() takes a flat batch of rows from any number of sequences; each sequence carries its own state
// (KV/latent caches, KDA state) in a SequenceState that the model creates (state/sequence_state.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/scratch_arena.h"
#include "experts/residency.h"
#include "experts/spine_streamer.h"
#include "experts/streaming_expert_source.h"
#include "ops/weight.h"
#include "runtime/batch.h"
#include "state/sequence_state.h"
#include "state/state_file.h"

namespace sluice {

// What `sluice inspect` prints and what the planners need; filled by each architecture from its config.
struct ModelInfo {
    std::string architecture;   // e.g. DeepseekV3ForCausalLM
    std::string model_type;     // e.g. kimi_k2
    int64_t vocab_size = 0;
    int64_t hidden_size = 0;
    int64_t num_hidden_layers = 0;
    int64_t n_moe_layers = 0;
    int64_t n_routed_experts = 0;
    int64_t num_experts_per_tok = 0;
    int64_t n_shared_experts = 0;
    uint64_t params_total = 0;           // all parameters (from tensor shapes; packed formats counted by elements)
    uint64_t params_active = 0;          // parameters used per token
    uint64_t expert_bytes = 0;           // bytes of one routed expert (all its matrices and scales)
    uint64_t routed_expert_bytes_total = 0;
    uint64_t spine_bytes = 0;            // everything that is not a routed expert
    std::map<std::string, uint64_t> bytes_by_dtype;
    std::vector<int32_t> eos_token_ids;
    int32_t bos_token_id = -1;
    int64_t max_position_embeddings = 0;
    uint64_t config_xxh3 = 0;   // fingerprint (load_model fills it): config.json's bytes
    uint64_t weights_xxh3 = 0;  // ... and the weight files' names and sizes
    StateFileModel state_file_model() const { return {architecture, config_xxh3, weights_xxh3}; }
};

struct LoadOptions {
    int n_threads = 0;            // 0 = all cores
    bool stream_experts = false;  // read routed experts from SSD on demand instead of the memory map
    StreamingOptions streaming;  // streaming.experts_dirs set: experts stream from that packed store
    // One budget for everything (0: no budget, experts served from the memory map). When set, experts stream
    // and the expert cache gets what the residency plan leaves (streaming.cache_bytes is then ignored).
    uint64_t memory_budget_bytes = 0;
    int64_t max_context_tokens = 4096;  // sequence state reserved in the plan: per-token caches for this many tokens
    // Sequences that run at once (the engine's max_sequences): fixed per-sequence state such as KDA's recurrent state
    // is reserved this many times, the per-token caches for max_context_tokens tokens in all.
    int64_t max_sequences = 1;
    // > 0: sequences may snapshot their recurrent state within a pass of up to this many rows (the prefix cache,
    // speculation); the plan reserves the copies and the journal (StateLayout::reserve_bytes). 0 for models
    // without recurrent state changes nothing.
    int64_t snapshot_rows = 0;
    // RAM the engine's prefix cache may hold (EngineOptions::prefix_cache_bytes): reserved in the plan's state line.
    uint64_t prefix_cache_bytes = 0;
    // Kimi Linear / K3: evaluate multi-token prefills of KDA layers in the chunked (WY) form instead of token by
    // token. Faster for long prompts, but no longer bit-identical under a different prefill chunking.
    bool kda_chunked_prefill = false;
    // With a memory budget: stream the spine matrices of layers >= this even when they would fit (tests, and
    // measuring spine streaming on a small model); -1: only what the budget requires.
    int64_t spine_stream_from = -1;
    // Rows of the largest forward pass the caller will run (the engine's max_batch_rows, a prefill chunk): the
    // model's scratch arena is sized once for it and the memory plan reserves exactly that (Model::activation_bytes).
    // A larger pass still runs, with what does not fit allocated per pass.
    int64_t max_pass_rows = 512;
};

class ExecContext;  // ops/exec_context.h: the thread pool, scratch arena and backend a pass runs in

// What the passes of a loaded model were planned for (LoadOptions::n_threads, LoadOptions::max_pass_rows): the
// context make_exec_context builds by default.
struct ExecOptions {
    int n_threads = 0;
    int64_t max_pass_rows = 512;
};

class Model {
public:
    virtual ~Model() = default;
    virtual const ModelInfo& info() const = 0;
    virtual std::unique_ptr<SequenceState> new_sequence() const = 0;
    // Runs every row of `batch` in `ctx` (its thread pool, its arena for the activations); appends each row to its
    // sequence's state. logits receives [batch.n_logits(), vocab_size] f32, rows in batch order of the rows that want
    // logits. The caller makes the context (make_exec_context); the model owns no pool or arena.
    virtual void forward(ExecContext& ctx, const Batch& batch, std::span<SequenceState* const> seqs,
                         std::vector<float>& logits) = 0;
    // True when running a sequence's tokens again as one prefill gives the same state and logits, bit for bit, as
    // the passes they first ran in (whatever their chunking). The engine preempts a request by dropping its state
    // and recomputing it later only then. (False for Kimi's KDA layers in the chunked prefill form.)
    virtual bool recompute_is_exact() const { return true; }
    // The activation scratch a forward pass of `rows` rows carves from its context's arena (computed from the
    // config; its high-water mark equals it). 0 for a model without a formula.
    virtual uint64_t activation_bytes(int64_t rows) const { return 0; }
    // The thread count and largest pass the model was loaded for (its memory plan reserves those activations).
    virtual ExecOptions exec_options() const { return {}; }
    // The streaming expert source when experts are streamed (for statistics), else null.
    virtual const StreamingExpertSource* streaming() const { return nullptr; }
    // The residency plan when a memory budget was given, else null.
    virtual const ResidencyPlan* residency() const { return nullptr; }
    // The spine streamer when the budget streams some layers' matrices, else null.
    virtual SpineStreamer* spine_streamer() const { return nullptr; }

    // For drafters that read the target (runtime/dspark_drafter.h). set_hidden_taps(ids): from now on every forward
    // pass writes, for each row, the raw residual stream after each listed layer (0-based, in the order given) into
    // its sequence's SequenceState::taps() row at the row's position (taps().width() = ids.size() * hidden_size).
    // Empty ids: no taps. Throws Error naming the architecture when it has no taps or an id is out of range.
    virtual void set_hidden_taps(std::vector<int64_t> layer_ids) {
        SLUICE_CHECK(layer_ids.empty(), info().architecture, " does not expose hidden states to a drafter");
    }
    // The token embedding and the LM head a drafter may share (null: not offered).
    virtual const Weight* token_embedding() const { return nullptr; }
    virtual const Weight* output_head() const { return nullptr; }
};

// Reads DIR/config.json, picks the architecture, binds the weights. Throws Error naming the file and field.
// Throws Error unless dir is an existing folder ("no such folder", "not a directory"); load_model starts with it.
void check_model_folder(const std::string& dir);
std::unique_ptr<Model> load_model(const std::string& dir, const LoadOptions& options = {});
// A context to run `model`'s passes in: a pool of `o.n_threads` threads and a scratch arena sized once for a pass
// of o.max_pass_rows rows (Model::activation_bytes); by default what the model was loaded for.
std::unique_ptr<ExecContext> make_exec_context(const Model& model, const ExecOptions& o);
std::unique_ptr<ExecContext> make_exec_context(const Model& model);
// Model::activation_bytes(rows) from a parsed config.json alone (sluice plan); look_ahead: experts stream.
class JsonObject;
uint64_t activation_bytes_from_config(const JsonObject& cfg, int64_t rows, bool look_ahead);

}  // namespace sluice
