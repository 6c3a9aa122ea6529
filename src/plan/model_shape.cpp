#include "plan/model_shape.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "experts/spine_streamer.h"
#include "formats/checkpoint.h"
#include "formats/hf_config.h"
#include "io/direct_reader.h"
#include "models/kimi_common.h"
#include "models/synth.h"

namespace sluice {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

bool is_routed(const std::string& n) { return contains(n, ".experts.") && !contains(n, "shared_experts"); }

// Layer index of "....layers.N.rest", or -1.
int64_t layer_of(const std::string& n) {
    const size_t p = n.find("layers.");
    if (p == std::string::npos) return -1;
    size_t i = p + 7, j = i;
    while (j < n.size() && std::isdigit(static_cast<unsigned char>(n[j]))) ++j;
    if (j == i || j >= n.size() || n[j] != '.') return -1;
    return std::stoll(n.substr(i, j - i));
}

// The matrix a tensor belongs to ("...q_proj" for "...q_proj.weight_scale_inv") and whether it is one of the
// matrices the architectures hand the spine streamer (blocks' matrices(): attention, KDA, dense MLP, shared
// experts, K3's latent projections; never routers, norms, convolutions or biases).
bool is_streamable_matrix(const std::string& n) {
    static const char* kSuffixes[] = {".weight", ".weight_scale_inv", ".weight_packed", ".weight_scale"};
    std::string module;
    for (const char* s : kSuffixes)
        if (ends_with(n, s)) {
            module = n.substr(0, n.size() - std::string(s).size());
            break;
        }
    if (module.empty()) return false;
    const std::string leaf = module.substr(module.rfind('.') + 1);
    static const std::set<std::string> kMatrices = {
        "q_proj", "k_proj", "v_proj", "o_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "g_proj",
        "f_a_proj", "f_b_proj", "b_proj", "g_a_proj", "g_b_proj", "gate_proj", "up_proj", "down_proj",
        "routed_expert_down_proj", "routed_expert_up_proj"};
    return kMatrices.count(leaf) != 0;
}

// Weight format of a matrix's payload tensor (scales are counted with their matrix).
std::string format_of(const ShapeTensor& t) {
    if (ends_with(t.name, "weight_packed")) return t.dtype == DType::I32 ? "int4" : "mxfp4";
    if (ends_with(t.name, "_blocks")) return "mxfp4";
    switch (t.dtype) {
        case DType::BF16: return "bf16";
        case DType::F16: return "f16";
        case DType::F8_E4M3: return "fp8";
        default: return "f32";
    }
}
bool is_scale(const std::string& n) {
    return ends_with(n, "_scale_inv") || ends_with(n, "weight_scale") || ends_with(n, "_scales") ||
           ends_with(n, "weight_shape");
}
// A tensor's matrix (strip the payload/scale suffix) so scales can be charged to their matrix's format.
std::string matrix_of(const std::string& n) {
    for (const char* s : {".weight_scale_inv", ".weight_packed", ".weight_scale", ".weight_shape", ".weight", "_blocks",
                          "_scales"})
        if (ends_with(n, s)) return n.substr(0, n.size() - std::string(s).size());
    return n;
}

int64_t get_int_any(const nlohmann::json& j, std::initializer_list<const char*> keys, int64_t fallback) {
    for (const char* k : keys)
        if (j.contains(k) && j[k].is_number_integer()) return j[k].get<int64_t>();
    return fallback;
}

std::shared_ptr<const StateLayout> state_layout_from_config(const std::string& config_json, const nlohmann::json& t,
                                                            const std::string& model_type, int64_t n_layers) {
    if (model_type == "kimi_linear" || model_type == "kimi_k3") {
        const JsonObject top = JsonObject::parse(config_json, "config.json");
        const auto text = top.get_object("text_config");
        return kimi_state_layout(KimiConfig::from_json(text ? *text : top));
    }
    auto layout = std::make_shared<StateLayout>();
    if (model_type == "deepseek_v3" || model_type == "kimi_k2") {
        const int64_t w = get_int_any(t, {"kv_lora_rank"}, 0) + get_int_any(t, {"qk_rope_head_dim"}, 0);
        for (int64_t l = 0; l < n_layers; ++l) layout->add_latent(w);
    } else {  // grouped-query attention: qwen3_moe, mixtral, gpt_oss
        const int64_t heads = get_int_any(t, {"num_attention_heads"}, 1);
        const int64_t hd = get_int_any(t, {"head_dim"}, get_int_any(t, {"hidden_size"}, 0) / std::max<int64_t>(1, heads));
        const int64_t w = get_int_any(t, {"num_key_value_heads"}, heads) * hd;
        for (int64_t l = 0; l < n_layers; ++l) layout->add_kv(w);
    }
    return layout;
}

}  // namespace

ModelShape shape_from_tensors(std::vector<ShapeTensor> tensors, const std::string& config_json, std::string source) {
    nlohmann::json top;
    try {
        top = nlohmann::json::parse(config_json);
    } catch (const std::exception& e) {
        fail(source, "/config.json: not valid JSON (", e.what(), ")");
    }
    SLUICE_CHECK(top.is_object(), source, "/config.json: not a JSON object");
    const nlohmann::json& t = top.contains("text_config") && top["text_config"].is_object() ? top["text_config"] : top;
    ModelShape m;
    m.source = std::move(source);
    // the top level's (K3: kimi_k3; its text_config says kimi_linear)
    if (top.contains("model_type") && top["model_type"].is_string()) m.model_type = top["model_type"].get<std::string>();
    m.n_layers = get_int_any(t, {"num_hidden_layers"}, 0);
    m.n_experts = get_int_any(t, {"n_routed_experts", "num_experts", "num_local_experts"}, 0);
    m.top_k = get_int_any(t, {"num_experts_per_tok", "num_experts_per_token"}, 0);
    m.hidden_size = get_int_any(t, {"hidden_size"}, 0);
    m.vocab_size = get_int_any(t, {"vocab_size"}, 0);
    SLUICE_CHECK(m.n_layers > 0, m.source, "/config.json: num_hidden_layers must be > 0");
    SLUICE_CHECK(m.n_experts > 0 && m.top_k > 0 && m.top_k <= m.n_experts, m.source,
                 "/config.json: a plan needs routed experts (num_experts_per_tok between 1 and the expert count)");
    m.state = state_layout_from_config(config_json, t, m.model_type, m.n_layers);
    m.activation_bytes = [cfg = JsonObject::parse(config_json, m.source + "/config.json")](int64_t rows) {
        return activation_bytes_from_config(cfg, rows, true);
    };

    std::set<int64_t> moe_layers;
    std::vector<std::vector<SpineExtent>> layer_ext(size_t(m.n_layers));
    std::map<std::string, std::string> matrix_format;  // matrix -> format of its payload
    for (const auto& x : tensors)
        if (!is_scale(x.name)) matrix_format[matrix_of(x.name)] = format_of(x);
    uint64_t expert_bias_bytes = 0, embed_bytes = 0, head_bytes = 0;
    std::set<std::string> expert_matrices_first;  // matrices of the first MoE layer's expert 0 (or stacked banks)
    int64_t first_moe = -1;
    for (const auto& x : tensors)
        if (is_routed(x.name)) {
            const int64_t l = layer_of(x.name);
            if (l >= 0 && (first_moe < 0 || l < first_moe)) first_moe = l;
        }
    SLUICE_CHECK(first_moe >= 0, m.source, ": no routed expert tensors ('.experts.' in their names)");
    // each expert's parts (a stacked bank [E, ...] holds expert e's at e/E of it), for its cache slot size
    std::map<std::pair<int64_t, int64_t>, uint64_t> slot_of;
    for (const auto& x : tensors) {
        const int64_t l = layer_of(x.name);
        if (is_routed(x.name)) {
            if (ends_with(x.name, "weight_shape")) continue;  // compressed-tensors shape records: never read
            if (ends_with(x.name, "_bias")) {  // gpt-oss: expert biases stay resident, as f32 copies of their rows
                expert_bias_bytes += x.nbytes;
                continue;
            }
            moe_layers.insert(l);
            m.routed_expert_bytes_total += x.nbytes;
            const size_t at = x.name.find(".experts.") + 9;
            const bool bank = at >= x.name.size() || !std::isdigit(static_cast<unsigned char>(x.name[at]));
            if (bank) {
                // a fused gate_up bank [E, 2I, H] (DeepSeek form) binds gate and up as two matrices, read apart;
                // gpt-oss's interleaved gate_up_proj_blocks is one
                const uint64_t parts = ends_with(x.name, "gate_up_proj") ? 2 : 1;
                const uint64_t len = x.nbytes / uint64_t(m.n_experts) / parts;
                for (int64_t e = 0; e < m.n_experts; ++e)
                    for (uint64_t q = 0; q < parts; ++q)
                        slot_of[{l, e}] += io::padded_bytes(x.file_offset + (uint64_t(e) * parts + q) * len, len);
                if (parts == 2 && l == first_moe) expert_matrices_first.insert(x.name + "#up");
            } else {
                slot_of[{l, std::stoll(x.name.substr(at))}] += io::padded_bytes(x.file_offset, x.nbytes);
            }
            if (l == first_moe && (bank || contains(x.name, ".experts.0.")) && !is_scale(x.name)) {
                expert_matrices_first.insert(matrix_of(x.name));
                if (m.expert_format.empty() || m.expert_format == "f32") m.expert_format = format_of(x);
            }
            continue;
        }
        m.spine_bytes += x.nbytes;
        const std::string fmt = matrix_format.count(matrix_of(x.name)) ? matrix_format[matrix_of(x.name)] : format_of(x);
        if (ends_with(x.name, "embed_tokens.weight")) {
            embed_bytes += x.nbytes;
        } else if (contains(x.name, "lm_head")) {
            head_bytes += x.nbytes;
            m.head_format = fmt;
        } else if (l >= 0 && l < m.n_layers && is_streamable_matrix(x.name)) {
            layer_ext[size_t(l)].push_back({x.file, x.file_offset, x.nbytes, 0});
            m.spine_matmul_bytes[fmt] += x.nbytes;
            if (!is_scale(x.name)) ++m.spine_matmuls;
        }
    }
    const bool tied = t.value("tie_word_embeddings", top.value("tie_word_embeddings", false)) && head_bytes == 0;
    if (tied) {
        head_bytes = embed_bytes;
        m.head_format = "bf16";
        for (const auto& x : tensors)
            if (ends_with(x.name, "embed_tokens.weight")) m.head_format = format_of(x);
    }
    m.head_bytes = head_bytes;
    m.n_moe_layers = int64_t(moe_layers.size());
    m.expert_bytes = m.routed_expert_bytes_total / uint64_t(m.n_moe_layers * m.n_experts);
    m.expert_matmuls = std::max<int64_t>(1, int64_t(expert_matrices_first.size()));
    const int64_t inter = get_int_any(t, {"moe_intermediate_size", "intermediate_size"}, 0);
    if (inter > 0 && m.hidden_size > 0 && (m.expert_matmuls == 2 || m.expert_matmuls == 3)) {
        if (m.expert_matmuls == 2) m.expert_matrix_shapes = {{2 * inter, m.hidden_size}, {m.hidden_size, inter}};
        else m.expert_matrix_shapes = {{inter, m.hidden_size}, {inter, m.hidden_size}, {m.hidden_size, inter}};
    }
    uint64_t streamable = 0;
    m.layer_read_bytes.resize(size_t(m.n_layers));
    for (size_t l = 0; l < layer_ext.size(); ++l) {
        const SpineLayerReads r = merge_spine_extents(std::move(layer_ext[l]));
        m.layer_read_bytes[l] = r.read_bytes;
        streamable += r.weight_bytes;
    }
    m.spine_bytes += expert_bias_bytes;
    m.spine_fixed_bytes = m.spine_bytes - std::min(m.spine_bytes, streamable);
    m.expert_slot_bytes = 0;
    for (const auto& [key, bytes] : slot_of) m.expert_slot_bytes = std::max(m.expert_slot_bytes, bytes);
    m.expert_slot_bytes = io::align_up(std::max(m.expert_slot_bytes, m.expert_bytes), io::k_direct_alignment_bytes);
    return m;
}

ModelShape shape_from_folder(const std::string& dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    SLUICE_CHECK(fs::is_directory(dir, ec), dir, ": no such model folder");
    const std::string cfg_path = (fs::path(dir) / "config.json").string();
    SLUICE_CHECK(fs::exists(cfg_path, ec), cfg_path, ": not found (a model folder needs config.json)");
    const std::string cfg = JsonObject::load_file(cfg_path).dump();
    const Checkpoint ck(dir);
    std::vector<ShapeTensor> list;
    for (const auto& name : ck.names()) {
        const TensorView v = ck.get(name);
        ShapeTensor s{name, v.dtype(), v.info->shape, v.nbytes(), 0, 0};
        if (v.nbytes() > 0) ck.locate(v.data, &s.file, &s.file_offset);
        list.push_back(std::move(s));
    }
    return shape_from_tensors(std::move(list), cfg, dir);
}

namespace {
struct Published {
    const char* like;
    const char* model;  // what it is
    int64_t layers, experts;
    const char* expert_dtype;
    int64_t vocab;
};
// The published checkpoints' layer and expert counts, expert formats and vocabularies; `sluice synth` supplies
// every other dimension (the real ones at --scale-down 1).
const Published kPublished[] = {
    {"kimi-k3", "Kimi K3 (2.78T total, 104B active)", 93, 896, "mxfp4", 163840},
    {"kimi-k2", "Kimi K2 Instruct (FP8 release)", 61, 384, "fp8", 163840},
    {"deepseek-v3", "DeepSeek-V3 (FP8 release)", 61, 256, "fp8", 129280},
    {"kimi-linear", "Kimi-Linear-48B-A3B", 27, 256, "bf16", 163840},
    {"qwen3-moe", "Qwen3-30B-A3B", 48, 128, "bf16", 151936},
    {"mixtral", "Mixtral-8x7B", 32, 8, "bf16", 32000},
    {"gpt-oss", "gpt-oss-20b", 24, 32, "mxfp4", 201088},
};
const Published& published(const std::string& like) {
    for (const auto& p : kPublished)
        if (like == p.like) return p;
    std::string names;
    for (const auto& p : kPublished) names += std::string(names.empty() ? "" : ", ") + p.like;
    fail("--like '", like, "' is not a model plan knows (", names, ")");
}
}  // namespace

std::string published_config_summary(const std::string& like) {
    const Published& p = published(like);
    return std::string(p.model) + ": " + std::to_string(p.layers) + " layers, " + std::to_string(p.experts) +
           " routed experts per MoE layer in " + p.expert_dtype + ", vocabulary " + std::to_string(p.vocab);
}

ModelShape shape_from_published(const std::string& like) {
    const Published& p = published(like);
    SynthOptions o{.like = p.like, .layers = p.layers, .experts = p.experts, .expert_dtype = p.expert_dtype,
                   .vocab_size = p.vocab};
    const SynthPlan plan = plan_synth(o);
    std::vector<ShapeTensor> list;
    uint64_t offset = 0;  // as if written back to back in one file (64-byte aligned)
    for (const auto& t : plan.tensors) {
        list.push_back({t.name, t.dtype, t.shape, t.nbytes(), 0, offset});
        offset = io::align_up(offset + t.nbytes(), 64);
    }
    ModelShape m = shape_from_tensors(std::move(list), plan.config_json, std::string(p.like) + " (published config)");
    m.source = std::string(p.like) + " (published config: " + published_config_summary(like) + ")";
    return m;
}

PlanInputs plan_inputs(const ModelShape& m, int64_t max_context_tokens, int64_t max_sequences, int64_t staging_experts,
                       int64_t pass_rows) {
    PlanInputs in;
    // as models/expert_setup.cpp: per-sequence state, plus the activations of the largest pass
    in.activation_bytes = m.activation_bytes(pass_rows);
    in.state_bytes = m.state->reserve_bytes(max_context_tokens, max_sequences) + in.activation_bytes;
    in.staging_bytes = uint64_t(std::max<int64_t>(1, staging_experts)) * (m.expert_bytes + 6 * 8192);
    return in;
}

}  // namespace sluice
