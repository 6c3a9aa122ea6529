// Parameter counting on a fabricated tensor list with Kimi K3's real names, shapes and dtypes (no data: the real
// checkpoint is 1.56 TB). The published figures are 2.78T total and ~104B activated (the digest derives 2.7795T and
// 104.19B from the shapes, with the embedding table not counted as active).
#include <gtest/gtest.h>

#include "models/model_info.h"

using namespace sluice;

namespace {

std::vector<TensorEntry> k3_tensors() {
    std::vector<TensorEntry> t;
    auto add = [&](const std::string& name, DType dt, std::vector<int64_t> shape) {
        uint64_t n = 1;
        for (auto d : shape) n *= uint64_t(d);
        t.push_back({name, dt, shape, n * (dt == DType::F32 ? 4 : dt == DType::U8 ? 1 : 2)});
    };
    const int64_t d = 7168, P = 12288, V = 163840, E = 896;
    const std::string m = "language_model.model.";
    add(m + "embed_tokens.weight", DType::BF16, {V, d});
    add(m + "norm.weight", DType::BF16, {d});
    add(m + "output_attn_res_norm.weight", DType::BF16, {d});
    add(m + "output_attn_res_proj.weight", DType::BF16, {1, d});
    add("language_model.lm_head.weight", DType::BF16, {V, d});
    for (int l = 0; l < 93; ++l) {
        const std::string p = m + "layers." + std::to_string(l) + ".";
        for (const char* n : {"input_layernorm", "post_attention_layernorm", "self_attention_res_norm", "mlp_res_norm"})
            add(p + n + ".weight", DType::BF16, {d});
        add(p + "self_attention_res_proj.weight", DType::BF16, {1, d});
        add(p + "mlp_res_proj.weight", DType::BF16, {1, d});
        const std::string a = p + "self_attn.";
        if (l % 4 == 3 || l == 92) {
            add(a + "q_a_proj.weight", DType::BF16, {1536, d});
            add(a + "q_a_layernorm.weight", DType::BF16, {1536});
            add(a + "q_b_proj.weight", DType::BF16, {18432, 1536});
            add(a + "kv_a_proj_with_mqa.weight", DType::BF16, {576, d});
            add(a + "kv_a_layernorm.weight", DType::BF16, {512});
            add(a + "kv_b_proj.weight", DType::BF16, {24576, 512});
            add(a + "g_proj.weight", DType::BF16, {P, d});
            add(a + "o_proj.weight", DType::BF16, {d, P});
        } else {
            for (const char* n : {"q_proj", "k_proj", "v_proj", "g_proj"}) add(a + n + ".weight", DType::BF16, {P, d});
            add(a + "o_proj.weight", DType::BF16, {d, P});
            add(a + "f_a_proj.weight", DType::BF16, {128, d});
            add(a + "f_b_proj.weight", DType::BF16, {P, 128});
            add(a + "b_proj.weight", DType::BF16, {96, d});
            for (const char* n : {"q_conv1d", "k_conv1d", "v_conv1d"}) add(a + n + ".weight", DType::F32, {P, 1, 4});
            add(a + "A_log", DType::F32, {128});
            add(a + "dt_bias", DType::F32, {P});
            add(a + "o_norm.weight", DType::F32, {128});
        }
        if (l == 0) {
            add(p + "mlp.gate_proj.weight", DType::BF16, {33792, d});
            add(p + "mlp.up_proj.weight", DType::BF16, {33792, d});
            add(p + "mlp.down_proj.weight", DType::BF16, {d, 33792});
            continue;
        }
        const std::string b = p + "block_sparse_moe.";
        add(b + "gate.weight", DType::BF16, {E, d});
        add(b + "gate.e_score_correction_bias", DType::F32, {E});
        add(b + "routed_expert_down_proj.weight", DType::BF16, {3584, d});
        add(b + "routed_expert_norm.weight", DType::BF16, {3584});
        add(b + "routed_expert_up_proj.weight", DType::BF16, {d, 3584});
        add(b + "shared_experts.gate_proj.weight", DType::BF16, {6144, d});
        add(b + "shared_experts.up_proj.weight", DType::BF16, {6144, d});
        add(b + "shared_experts.down_proj.weight", DType::BF16, {d, 6144});
        for (int e = 0; e < E; ++e) {
            const std::string x = b + "experts." + std::to_string(e) + ".";
            add(x + "w1.weight_packed", DType::U8, {3072, 1792});
            add(x + "w1.weight_scale", DType::U8, {3072, 112});
            add(x + "w3.weight_packed", DType::U8, {3072, 1792});
            add(x + "w3.weight_scale", DType::U8, {3072, 112});
            add(x + "w2.weight_packed", DType::U8, {3584, 1536});
            add(x + "w2.weight_scale", DType::U8, {3584, 96});
        }
    }
    return t;
}

TEST(ModelInfo, KimiK3CountsMatchPublishedFigures) {
    ModelInfo info;
    count_params(k3_tensors(), info, 896, 16, false);
    std::printf("[ k3       ] total %.4fT, active %.2fB, routed expert bytes %.4f TB, spine %.2f GB\n",
                double(info.params_total) / 1e12, double(info.params_active) / 1e9,
                double(info.routed_expert_bytes_total) / 1e12, double(info.spine_bytes) / 1e9);
    EXPECT_NEAR(double(info.params_total), 2.7795e12, 0.001e12);
    EXPECT_NEAR(double(info.params_active), 104.19e9, 0.05e9);
    // 82,432 experts x 17,547,264 bytes (digest section 7.2)
    EXPECT_EQ(info.routed_expert_bytes_total, 82432ull * 17547264ull);
    EXPECT_NEAR(double(info.spine_bytes), 113.5e9, 0.5e9);
}

}  // namespace
