// Routed mixture-of-experts with an optional always-on shared expert, over a flat batch of rows:
// route every row, take the union of the experts the rows chose, fetch them all at once through the
// ExpertSource, compute the experts resident at each moment (the cache hits, then each batch of arrivals) for all
// of their rows in one ops::expert_group call, then combine in a fixed order (ascending expert id per row) so that
// arrival order, grouping, caching and batching never change a bit of the output.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "core/function_ref.h"
#include "core/scratch_arena.h"
#include "experts/expert_source.h"
#include "ops/exec_context.h"
#include "ops/moe_ops.h"
#include "ops/weight.h"

namespace sluice {

struct SwigluWeights {
    Weight gate, up, down;  // gate/up [I, H], down [H, I]
    std::vector<Weight*> matrices() { return {&gate, &up, &down}; }
};

// The gated activation act(gate) * f(up) of the experts: SiLU (SwiGLU), K3's SiTU-GLU, gpt-oss's clamped SwiGLU
// (ops::glu).
using GluActivation = ops::GluSpec;

// y[n, H] = down(act(gate x) * up x), in ctx (every block here runs in the ExecContext it is given: its backend and
// pool for the ops, its arena for the scratch). Its gate and up activations [n, I] come from the arena.
void swiglu_forward(const SwigluWeights& w, const float* x, int64_t n, float* y, ExecContext& ctx,
                    const GluActivation& act = {});

// The scratch each block carves from the arena for n rows (ScratchArena's rounding); each architecture's
// activation_bytes adds these up, and the tests check the sum against the arena's high-water mark.
uint64_t swiglu_scratch_bytes(int64_t n, int64_t inter);
uint64_t route_scratch_bytes(int64_t n, int64_t n_experts);
// moe_forward_with: the [n, top_k, hidden] slots and one expert's gathered rows, plus the larger of what
// while_reading and one expert call carve.
uint64_t moe_with_scratch_bytes(int64_t n, int64_t top_k, int64_t hidden, uint64_t expert_call_bytes,
                                uint64_t while_reading_bytes);
// moe_forward: SwiGLU experts of intermediate size `inter`, a shared expert of `shared_inter` (0: none): the slots
// and one expert group's scratch (for max(n, min(n top_k, 64)) rows), or the larger of what while_reading and the
// shared expert carve.
uint64_t moe_scratch_bytes(int64_t n, int64_t top_k, int64_t hidden, int64_t inter, int64_t shared_inter,
                           uint64_t while_reading_bytes);

struct RouterParams {
    int64_t n_experts = 0;
    int64_t top_k = 0;
    int64_t n_group = 1;          // group-limited routing (DeepSeek-V3)
    int64_t topk_group = 1;
    bool norm_topk_prob = true;
    float routed_scaling_factor = 1.0f;
};

// The sigmoid router of a DeepSeek-V3-style config (DeepSeek-V3, Kimi): its fields under the hub's names.
template <typename Config>
RouterParams sigmoid_router_params(const Config& c) {
    return {.n_experts = c.n_routed_experts, .top_k = c.num_experts_per_tok, .n_group = c.n_group,
            .topk_group = c.topk_group, .norm_topk_prob = c.norm_topk_prob,
            .routed_scaling_factor = float(c.routed_scaling_factor)};
}

struct Routing {
    int64_t top_k = 0;
    std::vector<int32_t> experts;  // [n, top_k] ascending expert id within each row
    std::vector<float> weights;    // [n, top_k]
};

// Sigmoid router with correction bias used for selection only (noaux_tc): logits = gate x in f32. The result is the
// calling thread's buffer (grown once), valid until its next route_sigmoid or route_softmax; look-ahead has its own.
const Routing& route_sigmoid(const RouterParams& p, const Weight& gate, const std::vector<float>& bias, const float* x,
                      int64_t n, ExecContext& ctx);

// Look-ahead: applies the next MoE layer's router to this layer's input rows and hints the union of the experts it
// picks to the source, so their reads overlap the current layer's compute. Never changes results.
void prefetch_experts(ExpertSource& source, int64_t layer, const RouterParams& p, const Weight& gate,
                      const std::vector<float>& bias, const float* x, int64_t n, ExecContext& ctx);

// Softmax router (Qwen3-MoE, Mixtral): probabilities = softmax(gate x) over all experts in f32; the top_k largest;
// divided by their sum when norm_topk_prob (no epsilon), else the raw probabilities; times routed_scaling_factor.
// n_group / topk_group are not used. The result: as route_sigmoid's.
const Routing& route_softmax(const RouterParams& p, const Weight& gate, const float* x, int64_t n, ExecContext& ctx);

struct MoeStats {
    uint64_t rows = 0;
    uint64_t expert_rows = 0;       // sum over experts of rows routed to it
    uint64_t distinct_experts = 0;  // per call, summed
};

// Computes one routed expert for the m rows routed to it: y[m, hidden] = expert(x[m, hidden]).
// Borrowed (core/function_ref.h): called only while moe_forward_with runs.
using ExpertFn = FunctionRef<void(int32_t expert, const ExpertWeights& w, const float* x, int64_t m, float* y)>;

// out[n, H] = sum_k w_k * expert_k(x), each expert computed by `expert_fn` (architectures whose experts are not a
// plain gated MLP, e.g. gpt-oss's fused clamped SwiGLU with biases). while_reading runs once after the misses are
// issued and before any expert is computed, so it may still fill x: work that needs no routed expert overlaps
// the reads without changing any result. expert_fn may carve from ctx's arena, for all n rows whatever m is (so the
// high-water mark does not depend on the routing).
void moe_forward_with(int64_t layer, const Routing& routing, ExpertSource& source, ExpertFn expert_fn,
                      const float* x, int64_t n, int64_t hidden, float* out, ExecContext& ctx,
                      MoeStats* stats = nullptr, FunctionRef<void()> while_reading = {});

// out[n, H] = sum_k w_k * expert_k(x) (+ shared(x) if given, computed while the experts are read and added last),
// the ready experts in groups (ops::expert_group: one parallel section each on the CPU).
void moe_forward(int64_t layer, const Routing& routing, ExpertSource& source, const SwigluWeights* shared,
                 const float* x, int64_t n, int64_t hidden, float* out, ExecContext& ctx,
                 MoeStats* stats = nullptr, const GluActivation& act = {},
                 FunctionRef<void()> while_reading = {});

// The FFN of a DeepSeek-V3-style layer (DeepSeek-V3 / Kimi-K2, Kimi Linear): a sigmoid-routed MoE with correction
// bias and optional shared experts, or a dense SwiGLU MLP.
struct SigmoidMoeFfn {
    bool moe = false;
    SwigluWeights mlp;               // dense layers
    Weight router;                   // [E, hidden]
    std::vector<float> router_bias;  // [E] e_score_correction_bias
    bool has_shared = false;
    SwigluWeights shared;            // [n_shared * moe_intermediate]
};

// y[n, H] = ffn(x) of layer `layer`. With `next` (the next layer's FFN, or null) an MoE too and `look_ahead`, the
// experts its router picks for x are hinted to the source once this layer's reads are queued (this layer's experts
// are pinned by then), or before a dense layer's MLP; never changes results.
void sigmoid_moe_ffn_forward(int64_t layer, const SigmoidMoeFfn& ffn, const SigmoidMoeFfn* next, bool look_ahead,
                             const RouterParams& p, ExpertSource& source, const float* x, int64_t n, int64_t hidden,
                             float* y, ExecContext& ctx);
// Its scratch for n rows of a layer whose FFN is `moe` or dense (`dense_inter`), with the next layer's router
// applied for look-ahead (look_ahead_experts > 0: its expert count).
uint64_t sigmoid_moe_ffn_scratch_bytes(int64_t n, bool moe, const RouterParams& p, int64_t hidden, int64_t dense_inter,
                                       int64_t moe_inter, int64_t shared_inter, int64_t look_ahead_experts);

}  // namespace sluice
