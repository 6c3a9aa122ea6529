#include "models/synth.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "core/error.h"
#include "models/synth_roster.h"
#include "models/synth_tokenizer.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace sluice {

namespace {

struct ModelInfo {
    SynthModel model;
    const char* name;
    const char* model_type;
    SynthDims dims;  // the real checkpoint's values (vocab_size for reference: synth uses the tokenizer's)
    double routed_scaling_factor, rope_theta;
    json rope_scaling;
    int64_t max_position_embeddings, num_nextn_predict_layers;
    const char* transformers_version;
};

const std::vector<ModelInfo>& models() {
    static const std::vector<ModelInfo> m = {
        // model_type deepseek_v3, not the hub's kimi_k2: that names remote code this folder does not ship, and
        // transformers 5 reads Kimi K2 as deepseek_v3 (it has no kimi_k2 config; AutoTokenizer then fails).
        {SynthModel::KimiK2, "kimi-k2", "deepseek_v3",
         {7168, 64, 1536, 512, 128, 64, 128, 18432, 2048, 163840, 384, 8, 1, 1, 1, 1, 61}, 2.827, 50000.0,
         {{"beta_fast", 1.0}, {"beta_slow", 1.0}, {"factor", 32.0}, {"mscale", 1.0}, {"mscale_all_dim", 1.0},
          {"original_max_position_embeddings", 4096}, {"type", "yarn"}},
         131072, 0, "4.48.3"},
        {SynthModel::DeepseekV3, "deepseek-v3", "deepseek_v3",
         {7168, 128, 1536, 512, 128, 64, 128, 18432, 2048, 129280, 256, 8, 1, 8, 4, 3, 61}, 2.5, 10000.0,
         {{"beta_fast", 32}, {"beta_slow", 1}, {"factor", 40}, {"mscale", 1.0}, {"mscale_all_dim", 1.0},
          {"original_max_position_embeddings", 4096}, {"type", "yarn"}},
         163840, 1, "4.33.1"},
        // K3's own dimensions live in synth_k3.cpp; this entry only names it.
        {SynthModel::KimiK3, "kimi-k3", "kimi_k3", {}, 1.0, 0.0, nullptr, 1048576, 0, ""},
        // Kimi-Linear-48B-A3B: dimensions in synth_kimi_linear.cpp.
        {SynthModel::KimiLinear, "kimi-linear", "kimi_linear", {}, 2.446, 10000.0, nullptr, 1048576, 0, "4.56.2"},
        // Qwen3-30B-A3B and Mixtral-8x7B: dimensions in synth_gqa.cpp.
        {SynthModel::Qwen3Moe, "qwen3-moe", "qwen3_moe", {}, 1.0, 1e6, nullptr, 40960, 0, "4.51.0"},
        {SynthModel::Mixtral, "mixtral", "mixtral", {}, 1.0, 1e6, nullptr, 32768, 0, "4.36.0"},
        // gpt-oss-20b's dimensions live in synth_gpt_oss.cpp.
        {SynthModel::GptOss, "gpt-oss", "gpt_oss", {}, 1.0, 0.0, nullptr, 131072, 0, "4.55.0.dev0"},
        // Kimi K3's DSpark drafter (synth_dspark.cpp), sized from --target.
        {SynthModel::KimiK3DSpark, "kimi-k3-dspark", "k3_dspark", {}, 1.0, 50000.0, nullptr, 1048576, 0, ""},
        // Kimi K3's EAGLE-3 drafter (synth_eagle3.cpp), sized from --target.
        {SynthModel::KimiK3Eagle3, "kimi-k3-eagle3", "deepseek_v3", {}, 1.0, 50000.0, nullptr, 1048576, 0, ""},
    };
    return m;
}

const std::vector<std::pair<const char*, SynthDType>> kDTypes = {
    {"bf16", SynthDType::Bf16}, {"f32", SynthDType::F32}, {"fp8", SynthDType::Fp8}, {"int4", SynthDType::Int4},
    {"mxfp4", SynthDType::Mxfp4}};

const ModelInfo& info_of(SynthModel m) {
    for (const auto& i : models())
        if (i.model == m) return i;
    SLUICE_ASSERT(false, "unknown SynthModel");
    return models()[0];
}

SynthDims resolve_dims(const ModelInfo& info, const SynthOptions& o) {
    const int64_t k = o.scale_down;
    SynthDims d = synth::scaled_widths(info.dims, k);
    d.vocab_size = synth::synth_vocab_size(o);
    d.num_hidden_layers = o.layers;
    d.n_routed_experts = o.experts;
    d.num_experts_per_tok = std::min(d.num_experts_per_tok, o.experts);
    if (o.top_k > 0) {
        SLUICE_CHECK(o.top_k <= o.experts, "synth: --top-k ", o.top_k, " is more than the ", o.experts, " experts");
        d.num_experts_per_tok = o.top_k;
    }
    // At least one MoE layer whenever there are two or more layers.
    d.first_k_dense_replace = std::min(d.first_k_dense_replace, std::max<int64_t>(o.layers - 1, 0));
    // Group-limited routing needs E divisible by n_group, groups of >= 2 experts (the group score is the sum of
    // the top two) and enough experts in the chosen groups for top-k.
    int64_t g = std::min(d.n_group, o.experts);
    while (g > 1 && (o.experts % g != 0 || o.experts / g < 2)) --g;
    d.n_group = g;
    d.topk_group = std::min(d.topk_group, g);
    while (d.topk_group < g && d.topk_group * (o.experts / g) < d.num_experts_per_tok) ++d.topk_group;
    return d;
}

json quantization_config(SynthDType t) {
    if (t == SynthDType::Fp8)
        return {{"activation_scheme", "dynamic"}, {"fmt", "e4m3"}, {"quant_method", "fp8"},
                {"weight_block_size", {128, 128}}};
    if (t == SynthDType::Int4)
        return {{"config_groups",
                 {{"group_0",
                   {{"input_activations", nullptr}, {"output_activations", nullptr}, {"targets", {"Linear"}},
                    {"weights",
                     {{"actorder", nullptr}, {"block_structure", nullptr}, {"dynamic", false}, {"group_size", 32},
                      {"num_bits", 4}, {"observer", "minmax"}, {"observer_kwargs", json::object()},
                      {"strategy", "group"}, {"symmetric", true}, {"type", "int"}}}}}}},
                {"format", "pack-quantized"},
                {"ignore", {"lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|down)_proj.*"}},
                {"kv_cache_scheme", nullptr}, {"quant_method", "compressed-tensors"},
                {"quantization_status", "compressed"}};
    return nullptr;
}

std::string config_json(const ModelInfo& info, const SynthDims& d, SynthDType t) {
    json c = {
        {"architectures", {"DeepseekV3ForCausalLM"}},
        {"attention_bias", false},
        {"attention_dropout", 0.0},
        // The hub's auto_map is left out: it names modeling code this folder does not ship.
        {"aux_loss_alpha", 0.001},
        {"bos_token_id", synth::kSynthBosId},
        {"eos_token_id", synth::kSynthEosId},
        {"ep_size", 1},
        {"first_k_dense_replace", d.first_k_dense_replace},
        {"hidden_act", "silu"},
        {"hidden_size", d.hidden_size},
        {"initializer_range", 0.02},
        {"intermediate_size", d.intermediate_size},
        {"kv_lora_rank", d.kv_lora_rank},
        {"max_position_embeddings", info.max_position_embeddings},
        {"model_type", info.model_type},
        {"moe_intermediate_size", d.moe_intermediate_size},
        {"moe_layer_freq", 1},
        {"n_group", d.n_group},
        {"n_routed_experts", d.n_routed_experts},
        {"n_shared_experts", d.n_shared_experts},
        {"norm_topk_prob", true},
        {"num_attention_heads", d.num_attention_heads},
        {"num_experts_per_tok", d.num_experts_per_tok},
        {"num_hidden_layers", d.num_hidden_layers},
        {"num_key_value_heads", d.num_attention_heads},
        // The MTP layer is not synthesized, so it is not announced.
        {"num_nextn_predict_layers", 0},
        {"pretraining_tp", 1},
        {"q_lora_rank", d.q_lora_rank},
        {"qk_nope_head_dim", d.qk_nope_head_dim},
        {"qk_rope_head_dim", d.qk_rope_head_dim},
        {"rms_norm_eps", 1e-06},
        {"rope_scaling", info.rope_scaling},
        {"rope_theta", info.rope_theta},
        {"routed_scaling_factor", info.routed_scaling_factor},
        {"scoring_func", "sigmoid"},
        {"seq_aux", true},
        {"tie_word_embeddings", false},
        {"topk_group", d.topk_group},
        {"topk_method", "noaux_tc"},
        {"torch_dtype", "bfloat16"},
        {"transformers_version", info.transformers_version},
        {"use_cache", true},
        {"v_head_dim", d.v_head_dim},
        {"vocab_size", d.vocab_size},
    };
    json q = quantization_config(t);
    if (!q.is_null()) c["quantization_config"] = q;
    return c.dump(2) + "\n";
}

std::vector<TensorToWrite> deepseek_roster(const SynthDims& d, uint64_t seed, SynthDType t) {
    synth::Roster r(seed, t);
    const int64_t h = d.hidden_size;
    r.embedding("model.embed_tokens.weight", d.vocab_size, h);
    for (int64_t l = 0; l < d.num_hidden_layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        r.norm(p + "input_layernorm.weight", h);
        r.mla(p + "self_attn.", h, d.num_attention_heads, d.q_lora_rank, d.kv_lora_rank, d.qk_nope_head_dim,
              d.qk_rope_head_dim, d.v_head_dim);
        r.norm(p + "post_attention_layernorm.weight", h);
        if (l < d.first_k_dense_replace) {
            r.swiglu(p + "mlp.", d.intermediate_size, h);
            continue;
        }
        const int64_t E = d.n_routed_experts, m = d.moe_intermediate_size, s = d.n_shared_experts * m;
        r.sigmoid_router(p + "mlp.gate.", E, h);
        for (int64_t e = 0; e < E; ++e) r.swiglu(p + "mlp.experts." + std::to_string(e) + ".", m, h, true);
        r.swiglu(p + "mlp.shared_experts.", s, h);
    }
    r.norm("model.norm.weight", h);
    r.lm_head("lm_head.weight", d.vocab_size, h);
    return std::move(r.tensors);
}

bool is_synth_output(const std::string& name) {
    static const std::regex shard(R"(model-\d{5}-of-\d{5}\.safetensors(\.partial)?)");
    static const char* const fixed[] = {"config.json", "generation_config.json", "tokenizer.json",
                                        "tokenizer_config.json", "model.safetensors", "model.safetensors.index.json"};
    for (const char* f : fixed)
        if (name == f || name == std::string(f) + ".partial") return true;
    return std::regex_match(name, shard);
}

void prepare_dir(const std::string& dir, bool force) {
    SLUICE_CHECK(!dir.empty(), "synth: no output folder given (-o DIR)");
    std::error_code ec;
    if (fs::exists(dir, ec)) {
        SLUICE_CHECK(fs::is_directory(dir, ec), dir, ": exists and is not a folder");
        bool empty = fs::directory_iterator(dir, ec) == fs::directory_iterator();
        SLUICE_CHECK(!ec, dir, ": cannot list: ", ec.message());
        if (!empty) {
            SLUICE_CHECK(force, dir, ": folder is not empty (pass --force to replace a synthesized checkpoint there)");
            for (const auto& e : fs::directory_iterator(dir)) {
                const std::string n = e.path().filename().string();
                if (e.is_regular_file() && is_synth_output(n)) fs::remove(e.path());
            }
        }
    } else {
        fs::create_directories(dir, ec);
        SLUICE_CHECK(!ec, dir, ": cannot create folder: ", ec.message());
    }
    SLUICE_CHECK(::access(dir.c_str(), W_OK) == 0, dir, ": folder is not writable");
}

}  // namespace

std::optional<SynthModel> synth_model_from_name(std::string_view name) {
    for (const auto& i : models())
        if (name == i.name) return i.model;
    return std::nullopt;
}

std::optional<SynthDType> synth_dtype_from_name(std::string_view name) {
    for (const auto& [n, t] : kDTypes)
        if (name == n) return t;
    return std::nullopt;
}

std::string synth_model_names() {
    std::string s;
    for (const auto& i : models()) s += (s.empty() ? "" : ", ") + std::string(i.name);
    return s;
}

std::string synth_dtype_names() {
    std::string s;
    for (const auto& [n, t] : kDTypes) s += (s.empty() ? "" : ", ") + std::string(n);
    return s;
}

SynthPlan plan_synth(const SynthOptions& o) {
    auto model = synth_model_from_name(o.like);
    SLUICE_CHECK(model, "synth: unknown model '", o.like, "' (known: ", synth_model_names(), ")");
    const std::string dtype_name = !o.expert_dtype.empty()           ? o.expert_dtype
                                   : *model == SynthModel::GptOss ? "mxfp4"
                                                                  : "bf16";
    auto dtype = synth_dtype_from_name(dtype_name);
    SLUICE_CHECK(dtype, "synth: unknown expert dtype '", dtype_name, "' (known: ", synth_dtype_names(), ")");
    SLUICE_CHECK(o.layers >= 1 && o.layers <= 1024, "synth: --layers must be in [1, 1024], got ", o.layers);
    SLUICE_CHECK(o.experts >= 1 && o.experts <= 4096, "synth: --experts must be in [1, 4096], got ", o.experts);
    SLUICE_CHECK(o.scale_down >= 1 && o.scale_down <= 4096, "synth: --scale-down must be in [1, 4096], got ",
                 o.scale_down);
    const ModelInfo& info = info_of(*model);
    if (*model == SynthModel::KimiK3DSpark) {
        SLUICE_CHECK(*dtype == SynthDType::Bf16, "synth: kimi-k3-dspark is bf16 (its release format), not ", dtype_name);
        SLUICE_CHECK(o.layers <= 64, "synth: kimi-k3-dspark --layers must be in [1, 64] (published: 5), got ", o.layers);
        synth::DSparkSynth d = synth::dspark_plan(o);
        SynthPlan p{*model, *dtype, {}, std::move(d.config_json), std::move(d.tensors), 0};
        p.dims.hidden_size = d.hidden_size;
        p.dims.vocab_size = d.vocab_size;
        p.dims.num_hidden_layers = d.layers;
        p.dims.num_attention_heads = d.heads;
        for (const auto& t : p.tensors) p.tensor_bytes += t.nbytes();
        return p;
    }
    SLUICE_CHECK(o.draft_vocab_size == 0 || *model == SynthModel::KimiK3Eagle3,
                 "synth: --draft-vocab-size is only for --like kimi-k3-eagle3");
    if (*model == SynthModel::KimiK3Eagle3) {
        SLUICE_CHECK(*dtype == SynthDType::Bf16, "synth: kimi-k3-eagle3 is bf16 (its release format), not ",
                     dtype_name);
        synth::Eagle3Synth e = synth::eagle3_plan(o);
        SynthPlan p{*model, *dtype, {}, std::move(e.config_json), std::move(e.tensors), 0};
        p.dims.hidden_size = e.dims.hidden_size;
        p.dims.vocab_size = e.dims.vocab_size;
        p.dims.num_hidden_layers = 1;
        p.dims.num_attention_heads = e.dims.heads;
        for (const auto& t : p.tensors) p.tensor_bytes += t.nbytes();
        return p;
    }
    SLUICE_CHECK(o.target_dir.empty(), "synth: --target is only for --like kimi-k3-dspark and kimi-k3-eagle3");
    SLUICE_CHECK(o.draft_vocab_size == 0, "synth: --draft-vocab-size is only for --like kimi-k3-eagle3");
    if (*model == SynthModel::KimiK3) {
        SLUICE_CHECK(*dtype != SynthDType::Fp8 && *dtype != SynthDType::Int4, "synth: kimi-k3 experts are bf16, f32 or ",
                     "mxfp4 (its release format), not ", dtype_name);
        SynthPlan p{*model, *dtype, synth::k3_dims(o), "", {}, 0};
        p.config_json = synth::k3_config_json(p.dims, p.dtype);
        p.tensors = synth::k3_roster(p.dims, o.seed, p.dtype);
        for (const auto& t : p.tensors) p.tensor_bytes += t.nbytes();
        return p;
    }
    if (*model == SynthModel::KimiLinear) {
        SLUICE_CHECK(*dtype == SynthDType::Bf16 || *dtype == SynthDType::F32 || *dtype == SynthDType::Fp8,
                     "synth: kimi-linear experts are bf16, f32 or fp8, not ", dtype_name);
        SynthPlan p{*model, *dtype, synth::kimi_linear_dims(o), "", {}, 0};
        p.config_json = synth::kimi_linear_config_json(p.dims, p.dtype);
        p.tensors = synth::kimi_linear_roster(p.dims, o.seed, p.dtype);
        for (const auto& t : p.tensors) p.tensor_bytes += t.nbytes();
        return p;
    }
    if (*model == SynthModel::Qwen3Moe || *model == SynthModel::Mixtral) {
        SLUICE_CHECK(*dtype == SynthDType::Bf16 || *dtype == SynthDType::F32 || *dtype == SynthDType::Fp8,
                     "synth: ", o.like, " experts are bf16, f32 or fp8, not ", o.expert_dtype);
        SynthPlan p{*model, *dtype, synth::gqa_dims(*model, o), "", {}, 0};
        p.config_json = synth::gqa_config_json(*model, p.dims, p.dtype);
        p.tensors = synth::gqa_roster(*model, p.dims, o.seed, p.dtype);
        for (const auto& t : p.tensors) p.tensor_bytes += t.nbytes();
        return p;
    }
    if (*model == SynthModel::GptOss) {
        SLUICE_CHECK(*dtype == SynthDType::Mxfp4, "synth: gpt-oss experts are mxfp4 (its release format), not ",
                     dtype_name);
        SynthPlan p{*model, *dtype, synth::gpt_oss_dims(o), "", {}, 0};
        p.config_json = synth::gpt_oss_config_json(p.dims);
        p.tensors = synth::gpt_oss_roster(p.dims, o.seed);
        for (const auto& t : p.tensors) p.tensor_bytes += t.nbytes();
        return p;
    }
    SLUICE_CHECK(*dtype != SynthDType::Mxfp4, "synth: mxfp4 experts exist only for kimi-k3 and gpt-oss (", o.like,
                 " uses bf16, f32, fp8 or int4)");
    SynthPlan p{*model, *dtype, resolve_dims(info, o), "", {}, 0};
    p.config_json = config_json(info, p.dims, p.dtype);
    p.tensors = deepseek_roster(p.dims, o.seed, p.dtype);
    for (const auto& t : p.tensors) p.tensor_bytes += t.nbytes();
    return p;
}

SynthResult synth_checkpoint(const SynthOptions& o) {
    const auto t0 = std::chrono::steady_clock::now();
    SynthPlan plan = plan_synth(o);
    prepare_dir(o.out_dir, o.force);
    WriteOptions w;
    w.pool = o.pool;
    w.sync = o.sync;
    if (o.progress) w.progress = [&](uint64_t done) { o.progress(done, plan.tensor_bytes); };
    ShardedResult s = write_sharded_safetensors(o.out_dir, plan.tensors, o.shard_bytes, w);
    SynthResult r;
    r.files = s.files;
    r.bytes_written = s.file_bytes;
    r.n_tensors = plan.tensors.size();
    json gen = {{"bos_token_id", synth::kSynthBosId}, {"eos_token_id", synth::kSynthEosId}, {"do_sample", false}};
    if (*info_of(plan.model).transformers_version) gen["transformers_version"] = info_of(plan.model).transformers_version;
    const std::pair<std::string, std::string> texts[] = {
        {"tokenizer.json", synth::synth_tokenizer_json()},
        {"tokenizer_config.json", synth::synth_tokenizer_config_json()},
        {"generation_config.json", gen.dump(2) + "\n"},
        {"config.json", plan.config_json},  // last: its presence marks a complete checkpoint
    };
    for (const auto& [name, text] : texts) {
        // a DSpark or EAGLE-3 drafter folder holds its config and weights only: it uses the target's tokenizer
        const bool drafter = plan.model == SynthModel::KimiK3DSpark || plan.model == SynthModel::KimiK3Eagle3;
        if (drafter && name != "config.json") continue;
        write_text_file_atomic((fs::path(o.out_dir) / name).string(), text);
        r.files.push_back(name);
        r.bytes_written += text.size();
    }
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

}  // namespace sluice
