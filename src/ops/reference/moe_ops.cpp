// Reference twins of the MoE ops (ops/moe_ops.h): written from the model authors' definitions (DeepSeek-V3's
// noaux_tc gate, Qwen3-MoE's and Mixtral's softmax router, gpt-oss's top-k-then-softmax router, the SwiGLU
// variants), in double precision, a row at a time, with no shared code with ops/cpu. The op harness compares the
// CPU ops to these.
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "ops/moe_ops.h"
#include "ops/ops.h"

namespace sluice::ops::ref {

namespace {
// The k best (value, id) pairs: larger value first, lower id on ties.
std::vector<int32_t> best(const std::vector<double>& v, int64_t k) {
    std::vector<std::pair<double, int32_t>> p;
    for (size_t i = 0; i < v.size(); ++i) p.emplace_back(v[i], int32_t(i));
    std::stable_sort(p.begin(), p.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<int32_t> out;
    for (int64_t i = 0; i < k; ++i) out.push_back(p[size_t(i)].second);
    return out;
}
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
}  // namespace

void route(const RouterSpec& s, const float* logits, const float* bias, int64_t n, int32_t* experts, float* weights) {
    const int64_t E = s.n_experts, K = s.top_k;
    for (int64_t r = 0; r < n; ++r) {
        const float* l = logits + r * E;
        std::vector<double> score(static_cast<size_t>(E)), rank(static_cast<size_t>(E));
        if (s.scoring == RouterSpec::Scoring::Sigmoid) {
            for (int64_t e = 0; e < E; ++e) {
                score[size_t(e)] = sigmoid(l[e]);
                rank[size_t(e)] = score[size_t(e)] + (bias ? double(bias[e]) : 0.0);
            }
            if (s.n_group > 1) {  // keep the topk_group groups whose two best ranks sum highest
                const int64_t per = E / s.n_group;
                std::vector<double> group(static_cast<size_t>(s.n_group));
                for (int64_t g = 0; g < s.n_group; ++g) {
                    std::vector<double> members(rank.begin() + g * per, rank.begin() + (g + 1) * per);
                    std::sort(members.rbegin(), members.rend());
                    group[size_t(g)] = members[0] + members[1];
                }
                const auto kept = best(group, s.topk_group);
                for (int64_t e = 0; e < E; ++e)
                    if (std::find(kept.begin(), kept.end(), int32_t(e / per)) == kept.end()) rank[size_t(e)] = -INFINITY;
            }
        } else if (s.scoring == RouterSpec::Scoring::Softmax) {
            const double mx = *std::max_element(l, l + E);
            double sum = 0;
            for (int64_t e = 0; e < E; ++e) sum += std::exp(double(l[e]) - mx);
            for (int64_t e = 0; e < E; ++e) rank[size_t(e)] = score[size_t(e)] = std::exp(double(l[e]) - mx) / sum;
        } else {
            for (int64_t e = 0; e < E; ++e) rank[size_t(e)] = l[e];
        }
        auto chosen = best(rank, K);
        std::sort(chosen.begin(), chosen.end());
        std::vector<double> w(static_cast<size_t>(K));
        if (s.scoring == RouterSpec::Scoring::TopkSoftmax) {
            double mx = -INFINITY, sum = 0;
            for (auto e : chosen) mx = std::max(mx, double(l[e]));
            for (int64_t k = 0; k < K; ++k) sum += (w[size_t(k)] = std::exp(double(l[chosen[size_t(k)]]) - mx));
            for (auto& x : w) x /= sum;
        } else {
            double sum = 0;
            for (int64_t k = 0; k < K; ++k) sum += (w[size_t(k)] = score[size_t(chosen[size_t(k)])]);
            for (auto& x : w) x = (s.norm_topk_prob ? x / sum : x) * s.routed_scaling_factor;
        }
        for (int64_t k = 0; k < K; ++k) {
            experts[r * K + k] = chosen[size_t(k)];
            weights[r * K + k] = float(w[size_t(k)]);
        }
    }
}

void glu(const GluSpec& s, const float* gate, const float* up, int64_t stride, int64_t n, float* out) {
    for (int64_t i = 0; i < n; ++i) {
        const double g = gate[i * stride], u = up[i * stride];
        double y = 0;
        switch (s.kind) {
            case GluSpec::Kind::Silu: y = g * sigmoid(g) * u; break;
            case GluSpec::Kind::Situ:
                y = s.beta * std::tanh(g / s.beta) * sigmoid(g) * s.linear_beta * std::tanh(u / s.linear_beta);
                break;
            case GluSpec::Kind::ClampedSwiglu: {
                const double gc = std::min(g, double(s.limit)), uc = std::clamp(u, -double(s.limit), double(s.limit));
                y = (uc + 1.0) * gc * sigmoid(double(s.alpha) * gc);
                break;
            }
        }
        out[i] = float(y);
    }
}

void moe_combine(const float* y, const float* weights, int64_t n, int64_t top_k, int64_t hidden, float* out) {
    for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < hidden; ++j) {
            double acc = 0;
            for (int64_t k = 0; k < top_k; ++k) acc += double(weights[r * top_k + k]) * y[(r * top_k + k) * hidden + j];
            out[r * hidden + j] = float(acc);
        }
}

void expert_group(const GluSpec& act, std::span<const GroupExpert> experts, const float* x, int64_t top_k,
                  int64_t hidden, float* y) {
    for (const GroupExpert& e : experts) {
        const int64_t inter = e.gate->rows;
        std::vector<float> xs(size_t(e.m * hidden)), g(size_t(e.m * inter)), u(g.size()), ys(xs.size());
        for (int64_t j = 0; j < e.m; ++j)
            std::copy_n(x + (e.slots[j] / top_k) * hidden, hidden, xs.begin() + j * hidden);
        ref::matmul(*e.gate, xs.data(), e.m, g.data());
        ref::matmul(*e.up, xs.data(), e.m, u.data());
        ref::glu(act, g.data(), u.data(), 1, e.m * inter, g.data());
        ref::matmul(*e.down, g.data(), e.m, ys.data());
        for (int64_t j = 0; j < e.m; ++j) std::copy_n(ys.begin() + j * hidden, hidden, y + e.slots[j] * hidden);
    }
}

}  // namespace sluice::ops::ref
