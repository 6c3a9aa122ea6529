// `sluice synth`: random-weight checkpoints in the Hugging Face hub layout (config.json, sharded safetensors
// with the hub's tensor names, dtypes and quantization layouts, a small tokenizer) with the real per-layer
// dimensions of a named model, optionally scaled down, and by default a vocabulary the size of that tokenizer.
// transformers 5 reads the folders (AutoConfig, AutoTokenizer), except AutoConfig for kimi-k3, a model_type it
// does not have. Weights are a pure function of the seed and tensor name.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/safetensors_writer.h"

namespace sluice {

class ThreadPool;

// KimiK3DSpark, KimiK3Eagle3: the DSpark and EAGLE-3 drafters of a Kimi K3 target (SynthOptions::target_dir), not
// models of their own.
enum class SynthModel { KimiK2, DeepseekV3, KimiK3, KimiLinear, Qwen3Moe, Mixtral, GptOss, KimiK3DSpark, KimiK3Eagle3 };
// Bf16 / F32: routed experts in that dtype, everything else BF16. Fp8: the DeepSeek/Kimi-K2 hub layout (every
// Linear except router, embeddings and lm_head in F8_E4M3 with F32 128x128 weight_scale_inv). Int4: the
// Kimi-K2-Thinking compressed-tensors pack-quantized layout for routed experts only. Mxfp4: the Kimi K3 release
// layout (routed experts as U8 weight_packed E2M1 nibbles + U8 E8M0 weight_scale per 32 inputs) for K3, and the
// gpt-oss release layout (stacked `_blocks` [E, rows, cols/32, 16] + `_scales` E8M0) for gpt-oss, its only format.
enum class SynthDType { Bf16, F32, Fp8, Int4, Mxfp4 };

std::optional<SynthModel> synth_model_from_name(std::string_view name);  // "kimi-k2", "kimi-linear", ..., "gpt-oss"
std::optional<SynthDType> synth_dtype_from_name(std::string_view name);  // "bf16", "f32", "fp8", "int4", "mxfp4"
std::string synth_model_names();  // "kimi-k2, deepseek-v3" (for help and error text)
std::string synth_dtype_names();

struct SynthOptions {
    std::string like = "kimi-k2";
    int64_t layers = 2;
    int64_t experts = 8;        // routed experts per MoE layer; top-k is clamped to it
    int64_t top_k = 0;          // > 0: experts per token (DeepSeek-V3 layouts: kimi-k2, deepseek-v3); 0: the layout's
    std::string expert_dtype;   // empty: the model's default (bf16; gpt-oss: mxfp4)
    int64_t scale_down = 1;     // divide widths, heads and ranks by this (kept valid)
    int64_t vocab_size = 0;     // 0: the synthetic tokenizer's 512 ids, so every id decodes; else >= 512 rows
    uint64_t seed = 0;
    std::string out_dir;
    std::string target_dir;     // kimi-k3-dspark, -eagle3: the K3 checkpoint it drafts for (hidden, vocab, layers,
                                // embedding)
    int64_t draft_vocab_size = 0;  // kimi-k3-eagle3: > 0, below the target's vocabulary: a reduced head with d2t
    uint64_t shard_bytes = 0;   // 0: a single model.safetensors
    bool force = false;         // allow a non-empty out_dir (replaces the files synth writes)
    bool sync = true;           // fdatasync each file before renaming it into place
    ThreadPool* pool = nullptr; // nullptr: default_pool()
    std::function<void(uint64_t bytes_done, uint64_t bytes_total)> progress;
};

// Resolved model dimensions (after scale-down and clamping), named as in config.json.
struct SynthDims {
    int64_t hidden_size, num_attention_heads, q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim,
        v_head_dim, intermediate_size, moe_intermediate_size, vocab_size, n_routed_experts, num_experts_per_tok,
        n_shared_experts, n_group, topk_group, first_k_dense_replace, num_hidden_layers;
    // Kimi K3 (latent width of the routed experts) and Kimi Linear / K3 (the KDA linear-attention heads).
    int64_t routed_expert_hidden_size = 0, linear_num_heads = 0, linear_head_dim = 0;
    // Qwen3-MoE / Mixtral / gpt-oss: grouped-query attention; gpt-oss also a sliding window.
    int64_t num_key_value_heads = 0, head_dim = 0, sliding_window = 0;
};

struct SynthPlan {
    SynthModel model;
    SynthDType dtype;
    SynthDims dims;
    std::string config_json;
    std::vector<TensorToWrite> tensors;  // in file order, with their fills
    uint64_t tensor_bytes = 0;
};

// Validates the options and lays out config and tensors; no I/O. Throws Error naming the bad option.
SynthPlan plan_synth(const SynthOptions& opts);

struct SynthResult {
    std::vector<std::string> files;  // names inside out_dir
    uint64_t bytes_written = 0;      // all files
    size_t n_tensors = 0;
    double seconds = 0;
};

// Writes the checkpoint folder (created if missing). Throws Error on bad options, an unwritable or non-empty
// folder (unless force), or any write failure; files appear only when complete.
SynthResult synth_checkpoint(const SynthOptions& opts);

}  // namespace sluice
