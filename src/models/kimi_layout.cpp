#include "models/kimi_layout.h"

#include <optional>

#include "core/error.h"

namespace sluice {

namespace {

// transformers 5's list form: one string per layer, each one of two names.
std::optional<std::vector<bool>> string_layers(const JsonObject& j, const char* key, int64_t n, const char* yes,
                                               const char* no) {
    if (!j.has(key)) return std::nullopt;
    const auto names = j.get_string_list(key);
    SLUICE_CHECK(int64_t(names.size()) == n, j.what(), ": field '", key, "' has ", names.size(),
                 " entries, num_hidden_layers is ", n);
    std::vector<bool> out;
    for (size_t l = 0; l < names.size(); ++l) {
        SLUICE_CHECK(names[l] == yes || names[l] == no, j.what(), ": field '", key, "' entry ", l, " is '", names[l],
                     "' (expected '", yes, "' or '", no, "')");
        out.push_back(names[l] == yes);
    }
    return out;
}

// The hub form's 1-based full_attn_layers / kda_layers: every layer in exactly one list.
std::vector<bool> hub_mla_layers(const JsonObject& la, int64_t n) {
    std::vector<bool> is_mla(size_t(std::max<int64_t>(n, 0)), false);
    std::vector<int> seen(is_mla.size(), 0);
    for (const char* key : {"full_attn_layers", "kda_layers"}) {
        SLUICE_CHECK(la.has(key), la.what(), ": field '", key, "' is missing");
        for (int64_t l : la.get_int_list(key)) {
            SLUICE_CHECK(l >= 1 && l <= n, la.what(), ": field '", key, "': layer ", l,
                         " is outside [1, num_hidden_layers=", n, "] (the lists are 1-based)");
            is_mla[size_t(l - 1)] = std::string(key) == "full_attn_layers";
            ++seen[size_t(l - 1)];
        }
    }
    for (size_t l = 0; l < seen.size(); ++l)
        SLUICE_CHECK(seen[l] == 1, la.what(), ": layer ", l + 1, " (1-based) is listed ", seen[l],
                     " times in full_attn_layers + kda_layers (must be exactly once)");
    return is_mla;
}

void check_same(const JsonObject& j, const std::vector<bool>& a, const std::vector<bool>& b, const char* field_a,
                const char* field_b) {
    for (size_t l = 0; l < a.size(); ++l)
        SLUICE_CHECK(a[l] == b[l], j.what(), ": fields '", field_a, "' and '", field_b, "' disagree about layer ", l,
                     " (0-based)");
}

// A KDA dimension: the hub key inside linear_attn_config (required unless it has a default) wins, the
// transformers-5 key must then agree; without linear_attn_config the transformers-5 key or its default.
int64_t kda_dim(const JsonObject& j, const std::optional<JsonObject>& la, const char* hub_key,
                std::optional<int64_t> hub_default, const char* t5_key, int64_t t5_default, std::string& field) {
    if (la) {
        field = std::string("linear_attn_config.") + hub_key;
        const int64_t v = hub_default ? la->get_int(hub_key, *hub_default) : la->get_int(hub_key);
        if (j.has(t5_key))
            SLUICE_CHECK(j.get_int(t5_key) == v, j.what(), ": fields '", field, "' (", v, ") and '", t5_key, "' (",
                         j.get_int(t5_key), ") disagree");
        return v;
    }
    field = t5_key;
    return j.get_int(t5_key, t5_default);
}

}  // namespace

KimiLayout parse_kimi_layout(const JsonObject& j, int64_t n) {
    KimiLayout out;
    const auto la = j.get_object("linear_attn_config");
    const auto types = string_layers(j, "layer_types", n, "full_attention", "linear_attention");
    SLUICE_CHECK(la || types, j.what(), ": field 'linear_attn_config' (hub form) or 'layer_types' (transformers 5 "
                 "form) is missing: which layers are full (MLA) and which linear (KDA) attention is not given");
    if (la) {
        out.is_mla = hub_mla_layers(*la, n);
        if (types) check_same(j, out.is_mla, *types, "linear_attn_config", "layer_types");
        out.gate_lower_bound = float(la->get_float("gate_lower_bound", 0.0));
        out.full_rank_gate = la->get_bool("use_full_rank_gate", false);
    } else {
        out.is_mla = *types;
    }
    out.kda_heads = kda_dim(j, la, "num_heads", std::nullopt, "linear_num_heads", 32, out.heads_field);
    out.kda_head_dim = kda_dim(j, la, "head_dim", std::nullopt, "linear_head_dim", 128, out.head_dim_field);
    out.conv_kernel = kda_dim(j, la, "short_conv_kernel_size", 4, "linear_conv_kernel_dim", 4, out.conv_field);

    // dense MLP or MoE per layer: mlp_layer_types, else the first first_k_dense_replace layers dense
    const auto sparse = string_layers(j, "mlp_layer_types", n, "sparse", "dense");
    const int64_t k_dense = j.get_int("first_k_dense_replace", 1);
    std::vector<bool> prefix(size_t(std::max<int64_t>(n, 0)));
    for (int64_t l = 0; l < n; ++l) prefix[size_t(l)] = l >= k_dense;
    if (sparse && j.has("first_k_dense_replace")) check_same(j, *sparse, prefix, "mlp_layer_types", "first_k_dense_replace");
    out.is_sparse = sparse ? *sparse : prefix;
    return out;
}

std::string kimi_dense_mlp_prefix(const Checkpoint& ck, const std::string& layer_prefix) {
    const std::string saved = layer_prefix + "block_sparse_moe.";
    return !ck.has(layer_prefix + "mlp.gate_proj.weight") && ck.has(saved + "gate_proj.weight") ? saved
                                                                                               : layer_prefix + "mlp.";
}

}  // namespace sluice
