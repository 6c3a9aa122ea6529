// Speculative decoding with sampling: the verification rule (Sampler::verify) gives every token the distribution
// sampling gives it -- checked by chi-square over many seeds, a test that a deliberately biased rule fails -- and
// the engine's sampled speculative requests, on a small Markov-chain model whose exact distribution is known, follow
// it over whole continuations and give the same tokens alone and in a crowded batch.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>

#include "models/forward_common.h"
#include "models/model.h"
#include "ops/exec_context.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"

using namespace sluice;

namespace {

// Upper 0.999 quantile of chi-square with k degrees of freedom (Wilson-Hilferty; z = 3.09).
double chi2_critical(int k) {
    const double z = 3.0902, a = 2.0 / (9.0 * k);
    return k * std::pow(1 - a + z * std::sqrt(a), 3);
}

// sum (observed - expected)^2 / expected over cells with expected > 0; observations where expected == 0 make it
// infinite. Returns {statistic, degrees of freedom}.
std::pair<double, int> chi2(const std::map<int64_t, int64_t>& observed, const std::map<int64_t, double>& p, int64_t n) {
    double x = 0;
    int cells = 0;
    for (const auto& [k, q] : p) {
        if (q <= 0) continue;
        ++cells;
        const double e = q * double(n);
        const auto it = observed.find(k);
        const double o = it == observed.end() ? 0.0 : double(it->second);
        x += (o - e) * (o - e) / e;
    }
    for (const auto& [k, o] : observed)
        if (!p.count(k) || p.at(k) <= 0) x = INFINITY;
    return {x, cells - 1};
}

// The distribution sampling at temperature T with top-k gives (written here independently of Sampler).
std::vector<double> target(const std::vector<float>& logits, float T, size_t top_k) {
    std::vector<size_t> order(logits.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return logits[a] > logits[b]; });
    std::vector<double> p(logits.size(), 0.0);
    double sum = 0;
    for (size_t j = 0; j < std::min(top_k, order.size()); ++j) sum += (p[order[j]] = std::exp(double(logits[order[j]]) / T));
    for (auto& q : p) q /= sum;
    return p;
}

TEST(SpeculativeSampling, VerifyKeepsTheDistributionAndABiasedRuleFails) {
    const std::vector<float> logits = {1.0f, 2.2f, -0.5f, 0.7f, 1.9f, -3.0f};
    SamplingParams sp;
    sp.temperature = 0.8f;
    sp.top_k = 5;
    const auto p = target(logits, sp.temperature, 5);
    std::map<int64_t, double> pm;
    for (size_t i = 0; i < p.size(); ++i) pm[int64_t(i)] = p[i];
    const int64_t n = 20000;
    for (int32_t draft : {1, 3, 2, 5}) {  // likely, middling, unlikely, outside the top-k
        std::map<int64_t, int64_t> got, biased;
        int64_t accepted = 0;
        for (int64_t s = 0; s < n; ++s) {
            sp.seed = uint64_t(s) * 7919 + uint64_t(draft);
            Sampler a(sp);
            const auto v = a.verify(logits, draft);
            ++got[v.id];
            accepted += v.accepted ? 1 : 0;
            EXPECT_EQ(v.accepted, v.id == draft);
            // a rule that accepts too often: min(1, 2 p(draft)), then the rest as the real rule draws it
            Sampler b(sp);
            std::mt19937_64 rng(sp.seed);
            const double u = std::uniform_real_distribution<double>(0, 1)(rng);
            if (u < std::min(1.0, 2 * p[size_t(draft)]))
                ++biased[draft];
            else
                ++biased[b.verify(logits, draft).id];
        }
        const auto [x, df] = chi2(got, pm, n);
        EXPECT_LT(x, chi2_critical(df)) << "draft " << draft;
        EXPECT_NEAR(double(accepted) / double(n), p[size_t(draft)], 0.02) << "draft " << draft;
        if (p[size_t(draft)] > 0) {
            const auto [xb, dfb] = chi2(biased, pm, n);
            EXPECT_GT(xb, chi2_critical(dfb)) << "the biased rule should be caught, draft " << draft;
        }
    }
    // greedy: the argmax, accepted exactly when it is the draft
    SamplingParams g;
    Sampler s(g);
    EXPECT_EQ(s.verify(logits, 1).id, 1);
    EXPECT_TRUE(s.verify(logits, 1).accepted);
    EXPECT_EQ(s.verify(logits, 4).id, 1);
    EXPECT_FALSE(s.verify(logits, 4).accepted);
}

// A model whose next-token logits depend only on the current token: a Markov chain with a known distribution.
class MarkovModel : public Model {
public:
    static constexpr int64_t V = 4;
    MarkovModel() : layout_(std::make_shared<StateLayout>()) {
        info_.architecture = "MarkovTest";
        info_.vocab_size = V;
    }
    const ModelInfo& info() const override { return info_; }
    std::unique_ptr<SequenceState> new_sequence() const override { return std::make_unique<SequenceState>(layout_); }
    void forward(ExecContext&, const Batch& batch, std::span<SequenceState* const> seqs,
                 std::vector<float>& logits) override {
        RowGroups groups;
        const RowGroups& rows_of = group_rows(groups, batch, seqs, V, layout_.get());
        append_rows(batch, seqs, rows_of);
        logits.clear();
        for (int64_t i = 0; i < batch.size(); ++i)
            if (batch.want_logits[size_t(i)])
                for (int64_t v = 0; v < V; ++v) logits.push_back(table(batch.tokens[size_t(i)], int32_t(v)));
    }
    static float table(int32_t from, int32_t to) { return 0.9f * float(((from * 3 + to * 5) % 7)) - 1.5f; }

private:
    ModelInfo info_;
    std::shared_ptr<const StateLayout> layout_;
};

RequestParams sampled(uint64_t seed) {
    RequestParams p;
    p.prompt = {0};
    p.max_new_tokens = 3;
    p.stop_at_eos = false;
    p.sampling.temperature = 1.0f;
    p.sampling.seed = seed;
    p.draft_tokens = 2;
    // always proposes the chain's most likely continuation twice (right sometimes, wrong often)
    p.drafter = [](std::span<const int32_t> ctx, int64_t max_tokens, const SequenceState*) {
        std::vector<int32_t> d;
        int32_t t = ctx.back();
        for (int64_t j = 0; j < max_tokens; ++j) {
            int32_t best = 0;
            for (int32_t v = 1; v < MarkovModel::V; ++v)
                if (MarkovModel::table(t, v) > MarkovModel::table(t, best)) best = v;
            d.push_back(t = best);
        }
        return d;
    };
    return p;
}

TEST(SpeculativeSampling, EngineContinuationsFollowTheModel) {
    MarkovModel model;
    const int64_t n = 6000, V = MarkovModel::V;
    Engine e(model, {.max_batch_rows = 96, .max_sequences = 32, .max_context_tokens = 32 * 4});
    std::vector<std::vector<int32_t>> out(static_cast<size_t>(n));
    for (int64_t s = 0; s < n; ++s)
        e.submit(sampled(uint64_t(s)), [&out, s](const TokenEvent& ev) {
            if (ev.id >= 0) out[size_t(s)].push_back(ev.id);
            return true;
        });
    e.run_until_idle();
    EXPECT_GT(e.stats().accepted, 0);
    EXPECT_LT(e.stats().accepted, e.stats().drafted);
    std::map<int64_t, int64_t> got;
    for (const auto& o : out) {
        ASSERT_EQ(o.size(), 3u);
        ++got[(o[0] * V + o[1]) * V + o[2]];
    }
    // exact: the product of the chain's transition probabilities
    std::vector<std::vector<double>> t(static_cast<size_t>(V));
    for (int32_t a = 0; a < V; ++a) {
        std::vector<float> row;
        for (int32_t b = 0; b < V; ++b) row.push_back(MarkovModel::table(a, b));
        t[size_t(a)] = target(row, 1.0f, size_t(V));
    }
    std::map<int64_t, double> p;
    for (int32_t a = 0; a < V; ++a)
        for (int32_t b = 0; b < V; ++b)
            for (int32_t c = 0; c < V; ++c)
                p[(a * V + b) * V + c] = t[0][size_t(a)] * t[size_t(a)][size_t(b)] * t[size_t(b)][size_t(c)];
    const auto [x, df] = chi2(got, p, n);
    EXPECT_LT(x, chi2_critical(df));

    // and a request's tokens do not depend on the others in its passes: alone, each seed gives the same draws
    for (uint64_t s : {0u, 17u, 4242u}) {
        Engine alone(model, {.max_batch_rows = 96, .max_sequences = 1, .max_context_tokens = 8});
        std::vector<int32_t> ids;
        alone.submit(sampled(s), [&](const TokenEvent& ev) {
            if (ev.id >= 0) ids.push_back(ev.id);
            return true;
        });
        alone.run_until_idle();
        EXPECT_EQ(ids, out[size_t(s)]) << "seed " << s;
    }
}

}  // namespace
