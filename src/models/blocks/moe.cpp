#include "models/blocks/moe.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "core/error.h"
#include "ops/ops.h"

namespace sluice {

void swiglu_forward(const SwigluWeights& w, const float* x, int64_t n, float* y, ThreadPool& pool,
                    const GluActivation& act) {
    const int64_t inter = w.gate.rows;
    std::vector<float> g(static_cast<size_t>(n * inter)), u(static_cast<size_t>(n * inter));
    ops::matmul(w.gate, x, n, g.data(), pool);
    ops::matmul(w.up, x, n, u.data(), pool);
    // elementwise, so the split over threads changes no bit; SiTU's tanh and exp are as costly as a small matmul
    pool.parallel_for(n * inter, [&](int64_t a, int64_t b) { ops::glu(act, g.data() + a, u.data() + a, 1, b - a, g.data() + a); },
                      16384);
    ops::matmul(w.down, g.data(), n, y, pool);
}

namespace {
Routing route_with(const ops::RouterSpec& spec, const Weight& gate, const float* bias, const float* x, int64_t n,
                   ThreadPool& pool) {
    std::vector<float> logits(static_cast<size_t>(n * spec.n_experts));
    ops::matmul(gate, x, n, logits.data(), pool);
    Routing r;
    r.top_k = spec.top_k;
    r.experts.resize(size_t(n * spec.top_k));
    r.weights.resize(size_t(n * spec.top_k));
    ops::route(spec, logits.data(), bias, n, r.experts.data(), r.weights.data(), pool);
    return r;
}
ops::RouterSpec spec_of(const RouterParams& p, ops::RouterSpec::Scoring scoring) {
    return {scoring, p.n_experts, p.top_k, p.n_group, p.topk_group, p.norm_topk_prob, p.routed_scaling_factor};
}
}  // namespace

Routing route_sigmoid(const RouterParams& p, const Weight& gate, const std::vector<float>& bias, const float* x,
                      int64_t n, ThreadPool& pool) {
    return route_with(spec_of(p, ops::RouterSpec::Scoring::Sigmoid), gate, bias.empty() ? nullptr : bias.data(), x, n,
                      pool);
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
    return route_with(spec_of(p, ops::RouterSpec::Scoring::Softmax), gate, nullptr, x, n, pool);
}

void moe_forward_with(int64_t layer, const Routing& routing, ExpertSource& source, const ExpertFn& expert_fn,
                      const float* x, int64_t n, int64_t hidden, float* out, ThreadPool& pool, MoeStats* stats,
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

    ops::moe_combine(y_slots.data(), routing.weights.data(), n, K, hidden, out, pool);
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
    moe_forward_with(layer, routing, source, swiglu, x, n, hidden, out, pool, stats, [&] {
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
