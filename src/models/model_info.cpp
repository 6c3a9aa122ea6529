#include "models/model_info.h"

#include <string>

namespace sluice {

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

void fill_param_counts(const Checkpoint& ck, ModelInfo& info, int64_t n_routed_experts, int64_t top_k,
                       bool tied_embeddings, int64_t vocab_size, int64_t hidden_size) {
    uint64_t total = 0, routed = 0, routed_bytes = 0, all_bytes = 0;
    for (const auto& name : ck.names()) {
        const TensorView v = ck.get(name);
        const uint64_t bytes = v.nbytes();
        all_bytes += bytes;
        info.bytes_by_dtype[std::string(dtype_name(v.dtype()))] += bytes;
        uint64_t params = uint64_t(v.info->numel());
        if (ends_with(name, "weight_packed"))
            params = v.dtype() == DType::I32 ? params * 8 : params * 2;  // int4 x8 per i32, fp4 x2 per byte
        else if (ends_with(name, "_scale_inv") || ends_with(name, "weight_scale") || ends_with(name, "weight_shape"))
            params = 0;
        const bool is_routed = name.find(".experts.") != std::string::npos &&
                               name.find("shared_experts") == std::string::npos;
        total += params;
        if (is_routed) {
            routed += params;
            routed_bytes += bytes;
        }
    }
    info.params_total = total;
    info.params_active = total - routed;
    if (n_routed_experts > 0) info.params_active += routed / uint64_t(n_routed_experts) * uint64_t(top_k);
    info.routed_expert_bytes_total = routed_bytes;
    info.spine_bytes = all_bytes - routed_bytes;
    (void)tied_embeddings;
    (void)vocab_size;
    (void)hidden_size;
}

}  // namespace sluice
