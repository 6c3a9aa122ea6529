// The mixture-of-experts ops: routing from router logits, the gated activations of the experts, and the weighted
// combine of the experts' outputs. Like ops.h, each has a plain reference twin in ops::ref (ops/reference/moe_ops.cpp)
// that the op harness (tests/ops/op_harness.cpp) checks it against; the model files call these instead of loops of
// their own. Rows are independent: splitting them over threads or batches changes no bit.
#pragma once

#include <cstdint>
#include <span>

#include "core/thread_pool.h"
#include "ops/weight.h"

namespace sluice {
class ExecContext;  // ops/exec_context.h
}

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

// One routed expert of a group (expert_group): its gated MLP's matrices, gate and up [I, hidden] and down
// [hidden, I], and the slots of the m rows routed to it: slot s reads input row s / top_k of x and writes its output
// at y + s * hidden (MoE's [n, top_k, hidden] slots).
struct GroupExpert {
    const Weight* gate = nullptr;
    const Weight* up = nullptr;
    const Weight* down = nullptr;
    const int64_t* slots = nullptr;
    int64_t m = 0;
};

// The scratch floats expert_group needs for experts of intermediate size `inter` with `rows` rows in all (the sum
// of their m): each expert's gathered rows, gate and up activations, and outputs, each rounded up to
// kScratchAlignFloats (an expert has at least one row, so at most `rows` experts).
inline constexpr int64_t kScratchAlignFloats = 16;
inline int64_t expert_group_scratch_floats(int64_t rows, int64_t hidden, int64_t inter) {
    return rows * (2 * hidden + 2 * inter + 4 * (kScratchAlignFloats - 1));
}

// For each expert: y[slot] = down(act(gate x[slot / top_k], up x[slot / top_k])) for each of its slots, like
// llama.cpp's mul_mat_id: on the CPU one parallel section runs the whole group, its work items (the expert's rows
// gathered, then tiles of its gate and up rows with the activation of those columns, then tiles of its down rows
// with their scatter) handed to whichever thread is free, each expert's later items waiting only for its own
// earlier ones. Every output is computed by the kernels' per-row arithmetic, which depends on neither the tile, the
// thread nor the rest of the group: the bits of experts_one_by_one (the op harness checks it). On a context whose
// backend is Cuda it is cuda::expert_group (ops/cuda/backend.h: one call, the activation on the card too; its bits
// are the card's own, which do not depend on the rest of the group either, and scratch is not used).
// scratch: expert_group_scratch_floats(sum of m, hidden, inter) floats.
void expert_group(const GluSpec& act, std::span<const GroupExpert> experts, const float* x, int64_t top_k,
                  int64_t hidden, float* y, float* scratch, ExecContext& ctx);
// The same, an expert at a time, each matmul its own ops::matmul call (parallel section): what the MoE block did
// before expert_group, kept as the harness's bit-for-bit comparison.
void experts_one_by_one(const GluSpec& act, std::span<const GroupExpert> experts, const float* x, int64_t top_k,
                        int64_t hidden, float* y, float* scratch, ExecContext& ctx);

}  // namespace sluice::ops

namespace sluice::ops::cpu {
void expert_group(const GluSpec& act, std::span<const GroupExpert> experts, const float* x, int64_t top_k,
                  int64_t hidden, float* y, float* scratch, ThreadPool& pool);
}  // namespace sluice::ops::cpu

namespace sluice::ops::ref {
void route(const RouterSpec& s, const float* logits, const float* bias, int64_t n, int32_t* experts, float* weights);
void glu(const GluSpec& s, const float* gate, const float* up, int64_t stride, int64_t n, float* out);
void moe_combine(const float* y, const float* weights, int64_t n, int64_t top_k, int64_t hidden, float* out);
void expert_group(const GluSpec& act, std::span<const GroupExpert> experts, const float* x, int64_t top_k,
                  int64_t hidden, float* y);
}  // namespace sluice::ops::ref
