// What `sluice plan` needs to know about a model, from its tensor list and config.json alone (no weights read): the
// inputs of the engine's residency plan (experts/residency.h) — fixed spine, each layer's streamable matrices as
// the spine streamer reads them, the sequence state's layout — and the bytes a token multiplies, per weight format.
// From a model folder (safetensors headers) or from a published configuration that `sluice synth` lays out
// (--like kimi-k3: 93 layers, 896 experts, MXFP4 experts, the real vocabulary; nothing is written).
// tests/model/test_plan_shape.cpp checks that the plan made from a shape is the plan the engine makes at load.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "state/sequence_state.h"

namespace sluice {

struct ShapeTensor {
    std::string name;
    DType dtype = DType::F32;
    std::vector<int64_t> shape;
    uint64_t nbytes = 0;
    uint32_t file = 0;         // which weight file (0 for a laid-out, unwritten model)
    uint64_t file_offset = 0;  // where its bytes start in that file
};

struct ModelShape {
    std::string source;        // the folder, or e.g. "kimi-k3 (published config)"
    std::string model_type;
    int64_t n_layers = 0, n_moe_layers = 0, n_experts = 0, top_k = 0, hidden_size = 0, vocab_size = 0;
    uint64_t expert_bytes = 0;            // one routed expert as the cache holds it (matrices and scales)
    uint64_t expert_slot_bytes = 0;       // ... and as read: its parts' 4 KiB-aligned reads (one cache slot)
    std::string expert_format;            // e.g. "mxfp4", "bf16" (the format of its matrices)
    int64_t expert_matmuls = 0;           // matrices per expert (3; gpt-oss's fused gate_up: 2)
    // [rows, cols] of each of an expert's matrices, from config.json (gate and up [I, H], down [H, I]; gpt-oss's
    // fused gate_up [2I, H]); empty when the config does not say. Kernel rates depend on the shape (short rows).
    std::vector<std::pair<int64_t, int64_t>> expert_matrix_shapes;
    uint64_t routed_expert_bytes_total = 0;
    uint64_t spine_bytes = 0;             // resident when nothing streams: every non-expert tensor (+ gpt-oss biases)
    uint64_t spine_fixed_bytes = 0;       // the part that never streams (embeddings, head, norms, routers, ...)
    std::vector<uint64_t> layer_read_bytes;  // streamable matrices of each layer, as read (SpineStreamer::layer_bytes)
    // A token multiplies every spine matrix but reads one row of the embedding table; these are the matrices' bytes
    // per weight format ("bf16", "fp8", ...), the LM head counted apart (only rows that want logits run it).
    std::map<std::string, uint64_t> spine_matmul_bytes;
    int64_t spine_matmuls = 0;            // matrices a token multiplies (head excluded)
    uint64_t head_bytes = 0;
    std::string head_format;
    std::shared_ptr<const StateLayout> state;
    // The activation scratch of a pass of that many rows with experts streamed (Model::activation_bytes: the same
    // formula, from config.json).
    std::function<uint64_t(int64_t rows)> activation_bytes;

    uint64_t model_bytes() const { return spine_bytes + routed_expert_bytes_total; }
};

// Reads config.json and the safetensors headers of a model folder. Throws Error naming the file or field.
ModelShape shape_from_folder(const std::string& dir);
// `like` as `sluice synth --like` names it, with that model's published configuration (layers, experts, expert
// format and vocabulary: published_config_summary lists them). Throws Error on an unknown name.
ModelShape shape_from_published(const std::string& like);
std::string published_config_summary(const std::string& like);  // e.g. "93 layers, 896 experts (top 16), mxfp4 ..."

// The shape from a tensor list and config.json text (both entry points end here; unit-tested directly).
ModelShape shape_from_tensors(std::vector<ShapeTensor> tensors, const std::string& config_json, std::string source);

// The engine's inputs of plan_residency for this model (see models/expert_setup.cpp): state reserve for
// max_context_tokens tokens in max_sequences sequences plus the activations of a pass of pass_rows rows, staging
// for staging_experts experts.
struct PlanInputs {
    uint64_t state_bytes = 0, staging_bytes = 0;
    uint64_t activation_bytes = 0;  // included in state_bytes
};
PlanInputs plan_inputs(const ModelShape& m, int64_t max_context_tokens, int64_t max_sequences, int64_t staging_experts,
                       int64_t pass_rows);

}  // namespace sluice
