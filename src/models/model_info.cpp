#include "models/model_info.h"

#include "experts/usage_stats.h"

namespace sluice {

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

void count_params(const std::vector<TensorEntry>& tensors, ModelInfo& info, int64_t n_routed_experts, int64_t top_k,
                  bool tied_embeddings) {
    uint64_t total = 0, routed = 0, routed_bytes = 0, all_bytes = 0, embed = 0;
    for (const auto& t : tensors) {
        all_bytes += t.nbytes;
        info.bytes_by_dtype[std::string(dtype_name(t.dtype))] += t.nbytes;
        uint64_t params = 1;
        for (auto d : t.shape) params *= uint64_t(d);
        if (ends_with(t.name, "weight_packed"))
            params = t.dtype == DType::I32 ? params * 8 : params * 2;  // int4 x8 per i32, fp4 x2 per byte
        else if (ends_with(t.name, "_blocks") && t.dtype == DType::U8)
            params *= 2;  // gpt-oss MXFP4 blocks: two fp4 per byte
        else if (ends_with(t.name, "_scales") && t.dtype == DType::U8)
            params = 0;
        else if (ends_with(t.name, "_scale_inv") || ends_with(t.name, "weight_scale") || ends_with(t.name, "weight_shape"))
            params = 0;
        const bool is_routed = t.name.find(".experts.") != std::string::npos &&
                               t.name.find("shared_experts") == std::string::npos;
        total += params;
        if (ends_with(t.name, "embed_tokens.weight") && !tied_embeddings) embed += params;
        if (is_routed) {
            routed += params;
            routed_bytes += t.nbytes;
        }
    }
    info.params_total = total;
    info.params_active = total - routed - embed;
    if (n_routed_experts > 0) info.params_active += routed / uint64_t(n_routed_experts) * uint64_t(top_k);
    info.routed_expert_bytes_total = routed_bytes;
    info.spine_bytes = all_bytes - routed_bytes;
}

void fill_param_counts(const Checkpoint& ck, ModelInfo& info, int64_t n_routed_experts, int64_t top_k,
                       bool tied_embeddings, int64_t vocab_size, int64_t hidden_size) {
    std::vector<TensorEntry> list;
    for (const auto& name : ck.names()) {
        const TensorView v = ck.get(name);
        list.push_back({name, v.dtype(), v.info->shape, v.nbytes()});
    }
    count_params(list, info, n_routed_experts, top_k, tied_embeddings);
    // the fingerprint that ties state files (and usage statistics) to this checkpoint
    const ModelFingerprint f = model_fingerprint(ck, 0, 0, 0);
    info.config_xxh3 = f.config_hash;
    info.weights_xxh3 = f.weights_hash;
    (void)vocab_size;
    (void)hidden_size;
}

}  // namespace sluice
