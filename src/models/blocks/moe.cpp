#include "models/blocks/moe.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "core/error.h"
#include "ops/ops.h"

namespace sluice {

void GluActivation::apply(const float* gate, const float* up, int64_t n, float* out) const {
    if (kind == Kind::Silu) {
        ops::silu_mul(gate, up, n, out);
        return;
    }
    for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i], u = up[i];
        out[i] = (beta * std::tanh(g / beta) / (1.0f + std::exp(-g))) * (linear_beta * std::tanh(u / linear_beta));
    }
}

void swiglu_forward(const SwigluWeights& w, const float* x, int64_t n, float* y, ThreadPool& pool,
                    const GluActivation& act) {
    const int64_t inter = w.gate.rows;
    std::vector<float> g(static_cast<size_t>(n * inter)), u(static_cast<size_t>(n * inter));
    ops::matmul(w.gate, x, n, g.data(), pool);
    ops::matmul(w.up, x, n, u.data(), pool);
    // elementwise, so the split over threads changes no bit; SiTU's tanh and exp are as costly as a small matmul
    pool.parallel_for(n * inter, [&](int64_t a, int64_t b) { act.apply(g.data() + a, u.data() + a, b - a, g.data() + a); },
                      16384);
    ops::matmul(w.down, g.data(), n, y, pool);
}

namespace {
// Indices of the k largest values (ties: lower index first), returned in descending value order.
void top_k_indices(const float* v, int64_t n, int64_t k, std::vector<int32_t>& out) {
    out.resize(size_t(n));
    std::iota(out.begin(), out.end(), 0);
    std::partial_sort(out.begin(), out.begin() + k, out.end(), [&](int32_t a, int32_t b) {
        return v[a] > v[b] || (v[a] == v[b] && a < b);
    });
    out.resize(size_t(k));
}
}  // namespace

Routing route_sigmoid(const RouterParams& p, const Weight& gate, const std::vector<float>& bias, const float* x,
                      int64_t n, ThreadPool& pool) {
    const int64_t E = p.n_experts, K = p.top_k;
    std::vector<float> logits(static_cast<size_t>(n * E));
    ops::matmul(gate, x, n, logits.data(), pool);
    Routing r;
    r.top_k = K;
    r.experts.resize(size_t(n * K));
    r.weights.resize(size_t(n * K));
    const int64_t per_group = E / p.n_group;
    std::vector<float> scores(static_cast<size_t>(E)), choice(static_cast<size_t>(E)),
        group_scores(static_cast<size_t>(p.n_group));
    std::vector<int32_t> idx, gidx;
    for (int64_t i = 0; i < n; ++i) {
        for (int64_t e = 0; e < E; ++e) {
            scores[size_t(e)] = 1.0f / (1.0f + std::exp(-logits[size_t(i * E + e)]));
            choice[size_t(e)] = scores[size_t(e)] + (bias.empty() ? 0.0f : bias[size_t(e)]);
        }
        if (p.n_group > 1) {
            for (int64_t g = 0; g < p.n_group; ++g) {
                top_k_indices(choice.data() + g * per_group, per_group, 2, idx);
                group_scores[size_t(g)] = choice[size_t(g * per_group + idx[0])] + choice[size_t(g * per_group + idx[1])];
            }
            top_k_indices(group_scores.data(), p.n_group, p.topk_group, gidx);
            std::vector<uint8_t> keep(static_cast<size_t>(p.n_group), 0);
            for (auto g : gidx) keep[size_t(g)] = 1;
            for (int64_t e = 0; e < E; ++e)
                if (!keep[size_t(e / per_group)]) choice[size_t(e)] = -INFINITY;
        }
        top_k_indices(choice.data(), E, K, idx);
        std::sort(idx.begin(), idx.end());  // combine order: ascending expert id
        float sum = 0.0f;
        for (int64_t k = 0; k < K; ++k) sum += scores[size_t(idx[size_t(k)])];
        for (int64_t k = 0; k < K; ++k) {
            float w = scores[size_t(idx[size_t(k)])];
            if (p.norm_topk_prob) w /= (sum + 1e-20f);
            r.experts[size_t(i * K + k)] = idx[size_t(k)];
            r.weights[size_t(i * K + k)] = w * p.routed_scaling_factor;
        }
    }
    return r;
}

void prefetch_experts(ExpertSource& source, int64_t layer, const RouterParams& p, const Weight& gate,
                      const std::vector<float>& bias, const float* x, int64_t n, ThreadPool& pool) {
    const Routing guess = route_sigmoid(p, gate, bias, x, n, pool);
    std::vector<int32_t> experts(guess.experts);
    std::sort(experts.begin(), experts.end());
    experts.erase(std::unique(experts.begin(), experts.end()), experts.end());
    source.prefetch(layer, experts);
}

Routing route_softmax(const RouterParams& p, const Weight& gate, const float* x, int64_t n, ThreadPool& pool) {
    const int64_t E = p.n_experts, K = p.top_k;
    SLUICE_ASSERT(K > 0 && K <= E, "route_softmax: top_k ", K, " of ", E, " experts");
    std::vector<float> logits(static_cast<size_t>(n * E));
    ops::matmul(gate, x, n, logits.data(), pool);
    Routing r;
    r.top_k = K;
    r.experts.resize(size_t(n * K));
    r.weights.resize(size_t(n * K));
    std::vector<float> probs(static_cast<size_t>(E));
    std::vector<int32_t> idx;
    for (int64_t i = 0; i < n; ++i) {
        const float* l = logits.data() + i * E;
        const float mx = *std::max_element(l, l + E);
        float sum = 0.0f;
        for (int64_t e = 0; e < E; ++e) sum += (probs[size_t(e)] = std::exp(l[e] - mx));
        for (int64_t e = 0; e < E; ++e) probs[size_t(e)] /= sum;
        top_k_indices(probs.data(), E, K, idx);
        std::sort(idx.begin(), idx.end());  // combine order: ascending expert id
        float top_sum = 0.0f;
        for (int64_t k = 0; k < K; ++k) top_sum += probs[size_t(idx[size_t(k)])];
        for (int64_t k = 0; k < K; ++k) {
            float w = probs[size_t(idx[size_t(k)])];
            if (p.norm_topk_prob) w /= top_sum;
            r.experts[size_t(i * K + k)] = idx[size_t(k)];
            r.weights[size_t(i * K + k)] = w * p.routed_scaling_factor;
        }
    }
    return r;
}

void moe_forward_with(int64_t layer, const Routing& routing, ExpertSource& source, const ExpertFn& expert_fn,
                      const float* x, int64_t n, int64_t hidden, float* out, MoeStats* stats,
                      const std::function<void()>& while_reading) {
    const int64_t K = routing.top_k;
    // union of experts -> the (row, slot) pairs that use each
    std::map<int32_t, std::vector<int64_t>> users;  // expert -> slots (row * K + k)
    for (int64_t s = 0; s < n * K; ++s) users[routing.experts[size_t(s)]].push_back(s);
    std::vector<int32_t> experts;
    experts.reserve(users.size());
    std::vector<uint32_t> rows;
    rows.reserve(users.size());
    for (const auto& [e, s] : users) {
        experts.push_back(e);
        rows.push_back(uint32_t(s.size()));
    }
    source.note_use(layer, experts, rows, routing.experts, K);

    std::vector<float> y_slots(static_cast<size_t>(n * K * hidden));
    std::vector<float> xs, ys;
    source.fetch(layer, experts, [&](size_t i, const ExpertWeights& w) {
        const auto& slots = users[experts[i]];
        const int64_t m = int64_t(slots.size());
        xs.resize(size_t(m * hidden));
        ys.resize(size_t(m * hidden));
        for (int64_t j = 0; j < m; ++j)
            std::copy_n(x + (slots[size_t(j)] / K) * hidden, hidden, xs.data() + j * hidden);
        expert_fn(experts[i], w, xs.data(), m, ys.data());
        for (int64_t j = 0; j < m; ++j)
            std::copy_n(ys.data() + j * hidden, hidden, y_slots.data() + slots[size_t(j)] * hidden);
    }, while_reading);

    for (int64_t r = 0; r < n; ++r) {
        float* o = out + r * hidden;
        std::fill(o, o + hidden, 0.0f);
        for (int64_t k = 0; k < K; ++k) {
            const float w = routing.weights[size_t(r * K + k)];
            const float* y = y_slots.data() + (r * K + k) * hidden;
            for (int64_t j = 0; j < hidden; ++j) o[j] += y[j] * w;
        }
    }
    if (stats) {
        stats->rows += uint64_t(n);
        stats->expert_rows += uint64_t(n * K);
        stats->distinct_experts += experts.size();
    }
}

void moe_forward(int64_t layer, const Routing& routing, ExpertSource& source, const SwigluWeights* shared,
                 const float* x, int64_t n, int64_t hidden, float* out, ThreadPool& pool, MoeStats* stats,
                 const GluActivation& act, const std::function<void()>& while_reading) {
    auto swiglu = [&](int32_t e, const ExpertWeights& w, const float* xs, int64_t m, float* ys) {
        SLUICE_CHECK(w.gate.cols == hidden && w.down.rows == hidden, "layer ", layer, " expert ", e,
                     ": weight shapes do not match hidden size ", hidden);
        swiglu_forward({w.gate, w.up, w.down}, xs, m, ys, pool, act);
    };
    std::vector<float> s(shared ? static_cast<size_t>(n * hidden) : 0);
    moe_forward_with(layer, routing, source, swiglu, x, n, hidden, out, stats, [&] {
        if (while_reading) while_reading();
        if (shared) swiglu_forward(*shared, x, n, s.data(), pool, act);
    });
    if (shared)
        for (int64_t i = 0; i < n * hidden; ++i) out[i] += s[size_t(i)];
}

void sigmoid_moe_ffn_forward(int64_t layer, const SigmoidMoeFfn& ffn, const SigmoidMoeFfn* next, bool look_ahead,
                             const RouterParams& p, ExpertSource& source, const float* x, int64_t n, int64_t hidden,
                             float* y, ThreadPool& pool) {
    if (!ffn.moe) return swiglu_forward(ffn.mlp, x, n, y, pool);
    const Routing r = route_sigmoid(p, ffn.router, ffn.router_bias, x, n, pool);
    auto hint_next = [&] {
        if (look_ahead && next && next->moe)
            prefetch_experts(source, layer + 1, p, next->router, next->router_bias, x, n, pool);
    };
    moe_forward(layer, r, source, ffn.has_shared ? &ffn.shared : nullptr, x, n, hidden, y, pool, nullptr, {},
                hint_next);
}

}  // namespace sluice
