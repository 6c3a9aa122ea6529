// The MoE ops on the CPU (contracts in ops/moe_ops.h): the loops the model files had, moved here unchanged in
// arithmetic, with rows split over the thread pool.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "ops/cpu/vec_math.h"
#include "ops/moe_ops.h"
#include "ops/ops.h"

namespace sluice::ops {

namespace {

// Indices of the k largest values (ties: lower index first), returned in descending value order.
void top_k_indices(const float* v, int64_t n, int64_t k, std::vector<int32_t>& out) {
    out.resize(size_t(n));
    std::iota(out.begin(), out.end(), 0);
    std::partial_sort(out.begin(), out.begin() + k, out.end(),
                      [&](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
    out.resize(size_t(k));
}

struct RouteScratch {
    std::vector<float> scores, choice, group_scores;
    std::vector<int32_t> idx, gidx;
    std::vector<uint8_t> keep;
};
// each thread's, grown to the router's size once: routing allocates nothing after the first passes
thread_local RouteScratch t_route_scratch;

void route_sigmoid_row(const RouterSpec& p, const float* l, const float* bias, RouteScratch& w, int32_t* experts,
                       float* weights) {
    const int64_t E = p.n_experts, K = p.top_k, per_group = E / p.n_group;
    w.scores.resize(size_t(E));
    w.choice.resize(size_t(E));
    for (int64_t e = 0; e < E; ++e) {
        w.scores[size_t(e)] = 1.0f / (1.0f + std::exp(-l[e]));
        w.choice[size_t(e)] = w.scores[size_t(e)] + (bias ? bias[e] : 0.0f);
    }
    if (p.n_group > 1) {
        w.group_scores.resize(size_t(p.n_group));
        for (int64_t g = 0; g < p.n_group; ++g) {
            top_k_indices(w.choice.data() + g * per_group, per_group, 2, w.idx);
            w.group_scores[size_t(g)] = w.choice[size_t(g * per_group + w.idx[0])] + w.choice[size_t(g * per_group + w.idx[1])];
        }
        top_k_indices(w.group_scores.data(), p.n_group, p.topk_group, w.gidx);
        w.keep.assign(size_t(p.n_group), 0);
        for (auto g : w.gidx) w.keep[size_t(g)] = 1;
        for (int64_t e = 0; e < E; ++e)
            if (!w.keep[size_t(e / per_group)]) w.choice[size_t(e)] = -INFINITY;
    }
    top_k_indices(w.choice.data(), E, K, w.idx);
    std::sort(w.idx.begin(), w.idx.end());  // combine order: ascending expert id
    float sum = 0.0f;
    for (int64_t k = 0; k < K; ++k) sum += w.scores[size_t(w.idx[size_t(k)])];
    for (int64_t k = 0; k < K; ++k) {
        float x = w.scores[size_t(w.idx[size_t(k)])];
        if (p.norm_topk_prob) x /= (sum + 1e-20f);
        experts[k] = w.idx[size_t(k)];
        weights[k] = x * p.routed_scaling_factor;
    }
}

void route_softmax_row(const RouterSpec& p, const float* l, RouteScratch& w, int32_t* experts, float* weights) {
    const int64_t E = p.n_experts, K = p.top_k;
    w.scores.resize(size_t(E));
    const float mx = *std::max_element(l, l + E);
    float sum = 0.0f;
    for (int64_t e = 0; e < E; ++e) sum += (w.scores[size_t(e)] = std::exp(l[e] - mx));
    for (int64_t e = 0; e < E; ++e) w.scores[size_t(e)] /= sum;
    top_k_indices(w.scores.data(), E, K, w.idx);
    std::sort(w.idx.begin(), w.idx.end());  // combine order: ascending expert id
    float top_sum = 0.0f;
    for (int64_t k = 0; k < K; ++k) top_sum += w.scores[size_t(w.idx[size_t(k)])];
    for (int64_t k = 0; k < K; ++k) {
        float x = w.scores[size_t(w.idx[size_t(k)])];
        if (p.norm_topk_prob) x /= top_sum;
        experts[k] = w.idx[size_t(k)];
        weights[k] = x * p.routed_scaling_factor;
    }
}

void route_topk_softmax_row(const RouterSpec& p, const float* l, RouteScratch& w, int32_t* experts, float* weights) {
    const int64_t E = p.n_experts, K = p.top_k;
    top_k_indices(l, E, K, w.idx);
    const float mx = l[w.idx[0]];
    std::sort(w.idx.begin(), w.idx.end());
    float sum = 0.0f;
    for (int64_t k = 0; k < K; ++k) sum += std::exp(l[w.idx[size_t(k)]] - mx);
    for (int64_t k = 0; k < K; ++k) {
        experts[k] = w.idx[size_t(k)];
        weights[k] = std::exp(l[w.idx[size_t(k)]] - mx) / sum;
    }
}

}  // namespace

void route(const RouterSpec& s, const float* logits, const float* bias, int64_t n, int32_t* experts, float* weights,
           ThreadPool& pool) {
    SLUICE_CHECK(s.top_k > 0 && s.top_k <= s.n_experts, "route: top_k ", s.top_k, " of ", s.n_experts, " experts");
    SLUICE_CHECK(s.scoring != RouterSpec::Scoring::Sigmoid ||
                     (s.n_group >= 1 && s.n_experts % s.n_group == 0 && s.topk_group >= 1 && s.topk_group <= s.n_group &&
                      (s.n_group == 1 || s.n_experts / s.n_group >= 2)),
                 "route: ", s.n_experts, " experts in ", s.n_group, " groups, keeping ", s.topk_group);
    const int64_t E = s.n_experts, K = s.top_k;
    pool.parallel_for(n, [&](int64_t r0, int64_t r1) {
        RouteScratch& w = t_route_scratch;
        for (int64_t r = r0; r < r1; ++r) {
            const float* l = logits + r * E;
            switch (s.scoring) {
                case RouterSpec::Scoring::Sigmoid: route_sigmoid_row(s, l, bias, w, experts + r * K, weights + r * K); break;
                case RouterSpec::Scoring::Softmax: route_softmax_row(s, l, w, experts + r * K, weights + r * K); break;
                case RouterSpec::Scoring::TopkSoftmax:
                    route_topk_softmax_row(s, l, w, experts + r * K, weights + r * K);
                    break;
            }
        }
    }, 16);
}

void glu(const GluSpec& s, const float* gate, const float* up, int64_t stride, int64_t n, float* out) {
    switch (s.kind) {
        case GluSpec::Kind::Silu:
            if (stride == 1) return silu_mul(gate, up, n, out);
            for (int64_t i = 0; i < n; ++i) {
                const float g = gate[i * stride];
                out[i] = g / (1.0f + std::exp(-g)) * up[i * stride];
            }
            return;
        case GluSpec::Kind::Situ: {  // vec_math.h: a loop the compiler vectorises (libm's tanhf was 8.5% of a K3 prefill)
            auto situ = [&](float g, float u) {
                return (s.beta * cpu::tanh_f32(g / s.beta) / (1.0f + cpu::exp_f32(-g))) *
                       (s.linear_beta * cpu::tanh_f32(u / s.linear_beta));
            };
            if (stride == 1)
                for (int64_t i = 0; i < n; ++i) out[i] = situ(gate[i], up[i]);
            else
                for (int64_t i = 0; i < n; ++i) out[i] = situ(gate[i * stride], up[i * stride]);
            return;
        }
        case GluSpec::Kind::ClampedSwiglu:
            for (int64_t i = 0; i < n; ++i) {
                const float g = std::min(gate[i * stride], s.limit);
                const float u = std::clamp(up[i * stride], -s.limit, s.limit);
                const float sg = g * (1.0f / (1.0f + std::exp(-g * s.alpha)));
                out[i] = (u + 1.0f) * sg;
            }
            return;
    }
}

void moe_combine(const float* y, const float* weights, int64_t n, int64_t top_k, int64_t hidden, float* out,
                 ThreadPool& pool) {
    pool.parallel_for(n, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            float* o = out + r * hidden;
            std::fill(o, o + hidden, 0.0f);
            for (int64_t k = 0; k < top_k; ++k) {
                const float w = weights[r * top_k + k];
                const float* yk = y + (r * top_k + k) * hidden;
                for (int64_t j = 0; j < hidden; ++j) o[j] += yk[j] * w;
            }
        }
    }, 4);
}

}  // namespace sluice::ops
