// The mixture-of-experts ops: routing from router logits, the gated activations of the experts, and the weighted
// combine of the experts' outputs. Like ops.h, each has a plain reference twin in ops::ref (ops/reference/moe_ops.cpp)
// that the op harness (tests/ops/op_harness.cpp) checks it against; the model files call these instead of loops of
// their own. Rows are independent: splitting them over threads or batches changes no bit.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"

namespace sluice::ops {

struct RouterSpec {
    enum class Scoring : uint8_t {
        // DeepSeek-V3 / Kimi: score = sigmoid(logit); experts chosen by score + bias (the correction bias), within
        // the topk_group of n_group groups ranked by their two best choices; weight = score
        Sigmoid,
        // Qwen3-MoE / Mixtral: probabilities = softmax over all experts; the top_k largest; weight = probability
        Softmax,
        // gpt-oss: the top_k largest logits; weights = softmax over those k
        TopkSoftmax,
    };
    Scoring scoring = Scoring::Sigmoid;
    int64_t n_experts = 0, top_k = 0;
    int64_t n_group = 1, topk_group = 1;  // Sigmoid only
    bool norm_topk_prob = false;          // Sigmoid, Softmax: weights divided by their sum over the k
    float routed_scaling_factor = 1.0f;   // Sigmoid, Softmax: weights multiplied by it at the end
};

// logits [n, n_experts] -> experts [n, top_k] (ascending id within a row: the combine order) and weights [n, top_k].
// bias [n_experts] (Sigmoid's correction bias) may be null. Ties go to the lower expert id.
void route(const RouterSpec& s, const float* logits, const float* bias, int64_t n, int32_t* experts, float* weights,
           ThreadPool& pool);

struct GluSpec {
    enum class Kind : uint8_t {
        Silu,           // silu(g) * u
        Situ,           // Kimi K3: beta tanh(g / beta) sigmoid(g) * linear_beta tanh(u / linear_beta)
        ClampedSwiglu,  // gpt-oss: g' = min(g, limit), u' = clamp(u, -limit, limit); (u' + 1) g' sigmoid(alpha g')
    };
    Kind kind = Kind::Silu;
    float beta = 4.0f, linear_beta = 25.0f;  // Situ
    float alpha = 1.702f, limit = 7.0f;      // ClampedSwiglu
};

// out[i] = act(gate[i * stride], up[i * stride]) for i < n (stride 2 reads gpt-oss's interleaved gate/up rows).
void glu(const GluSpec& s, const float* gate, const float* up, int64_t stride, int64_t n, float* out);

// out[r] = sum over k, in order, of weights[r, k] * y[r, k] (y [n, top_k, hidden]: each slot's expert output).
void moe_combine(const float* y, const float* weights, int64_t n, int64_t top_k, int64_t hidden, float* out,
                 ThreadPool& pool);

}  // namespace sluice::ops

namespace sluice::ops::ref {
void route(const RouterSpec& s, const float* logits, const float* bias, int64_t n, int32_t* experts, float* weights);
void glu(const GluSpec& s, const float* gate, const float* up, int64_t stride, int64_t n, float* out);
void moe_combine(const float* y, const float* weights, int64_t n, int64_t top_k, int64_t hidden, float* out);
}  // namespace sluice::ops::ref
