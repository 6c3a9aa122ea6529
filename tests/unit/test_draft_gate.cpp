// The speculative pays-off gate (runtime/draft_gate.h): its cost model, the lengths it picks from acceptance, turning
// itself off and probing back, determinism (its choices are a function of what it was told, nothing else), and the
// confidence cut of a DSpark block.
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "runtime/draft_gate.h"

using namespace sluice;

namespace {

// Kimi K3's shape: a 113.5 GB spine, 92 MoE layers of 896 experts of 17.5 MB, top 16.
DraftCost k3() { return {113.5e9, 17.5e6, 92, 896, 16, 0}; }
// Only a spine (a dense model, or everything shared): extra rows read nothing more.
DraftCost dense() { return {1e9, 0, 0, 0, 0, 0}; }

// next() and record() driven by a fixed acceptance pattern; returns the lengths chosen.
std::vector<int64_t> drive(DraftGate& g, int steps, int64_t accept_upto) {
    std::vector<int64_t> lengths;
    for (int i = 0; i < steps; ++i) {
        const int64_t k = g.next();
        lengths.push_back(k);
        if (k > 0) g.record(k, std::min(k, accept_upto));
    }
    return lengths;
}

}  // namespace

TEST(DraftGate, PassBytesFollowTheUnionOfExperts) {
    const DraftCost c = k3();
    EXPECT_DOUBLE_EQ(c.pass_bytes(1), 113.5e9 + 92 * 17.5e6 * 896 * (16.0 / 896));
    double prev = c.pass_bytes(1);
    for (int64_t rows = 2; rows <= 64; ++rows) {
        const double b = c.pass_bytes(rows);
        EXPECT_GT(b, prev);
        EXPECT_LT(b - prev, 92 * 17.5e6 * 16 + 1);  // a row adds at most its own experts
        prev = b;
    }
    DraftCost with_model = c;
    with_model.draft_bytes_per_token = 1e9;
    EXPECT_DOUBLE_EQ(with_model.pass_bytes(3) - c.pass_bytes(3), 2e9);
}

TEST(DraftGate, AlwaysAcceptedDraftsGrowToTheMaximum) {
    DraftGate g(dense(), 6);
    const auto lengths = drive(g, 40, 1000);
    EXPECT_EQ(lengths.back(), 6);
    EXPECT_FALSE(g.off());
    EXPECT_GT(g.acceptance(), 0.9);
}

TEST(DraftGate, RejectedDraftsTurnItOffThenItProbesLessAndLessOften) {
    DraftGate g(k3(), 7);
    const auto lengths = drive(g, 400, 0);
    EXPECT_TRUE(g.off());
    // a few verifies before it stops, then probes after 16, 32, 64, 128 steps (waits double after each failed probe)
    std::vector<int64_t> drafting;
    for (size_t i = 0; i < lengths.size(); ++i)
        if (lengths[i] > 0) drafting.push_back(int64_t(i));
    ASSERT_GE(drafting.size(), 3u);
    EXPECT_LE(drafting.size(), 12u) << "it kept drafting against every rejection";
    const size_t last_run = drafting.size() - 1;
    EXPECT_GT(drafting[last_run] - drafting[last_run - 1], drafting[last_run - 1] - drafting[last_run - 2]);
    EXPECT_EQ(g.steps_off(), int64_t(lengths.size() - drafting.size()));
    EXPECT_EQ(g.best_length(), 0);
}

TEST(DraftGate, ComesBackOnWhenAProbePays) {
    DraftGate g(k3(), 7);
    drive(g, 60, 0);
    ASSERT_TRUE(g.off());
    const auto lengths = drive(g, 200, 1000);  // the drafts start being right
    EXPECT_FALSE(g.off());
    EXPECT_GT(lengths.back(), 1);
}

TEST(DraftGate, ExpensiveRowsNeedMoreAcceptance) {
    // With K3's experts a verify row costs ~1/8 of a pass more; with a spine alone it costs nothing: at the same
    // acceptance the dense model drafts at least as far, and a draft model's own cost shortens drafts further.
    DraftGate cheap(dense(), 7), costly(k3(), 7);
    DraftCost with_model = k3();
    with_model.draft_bytes_per_token = 20e9;
    DraftGate costlier(with_model, 7);
    for (DraftGate* g : {&cheap, &costly, &costlier})
        for (int i = 0; i < 30; ++i) g->record(4, i % 3 == 0 ? 1 : 3);  // ~70% of drafts kept
    EXPECT_GE(cheap.best_length(), costly.best_length());
    EXPECT_GE(costly.best_length(), costlier.best_length());
    EXPECT_GT(costly.best_length(), 0);
    EXPECT_GT(cheap.gain(cheap.best_length()), costly.gain(costly.best_length()));
}

// A drafter whose own bytes make the prior (a = 1/2) say no, while drafts that nearly always land would pay.
DraftCost k3_with_costly_drafter() {
    DraftCost c = k3();
    c.draft_bytes_per_token = 60e9;
    return c;
}

TEST(DraftGate, VerifiesAFewTimesBeforeJudgingADrafterThatCouldPay) {
    DraftGate g(k3_with_costly_drafter(), 4);
    EXPECT_EQ(g.best_length(), 0);
    const auto lengths = drive(g, 30, 1000);  // every draft right
    for (int64_t i = 0; i < DraftGate::kWarmupVerifies; ++i) EXPECT_GE(lengths[size_t(i)], 1) << i;
    EXPECT_FALSE(g.off());
    EXPECT_GE(lengths.back(), 1);
}

TEST(DraftGate, JudgesAfterOneVerifyWhenOneMoreAcceptedDraftWouldNotPay) {
    DraftGate g(k3_with_costly_drafter(), 4);
    auto lengths = drive(g, 2, 0);  // the first verify's drafts all wrong: at best 1 of 2 would be right next time
    EXPECT_GE(lengths[0], 1);
    EXPECT_EQ(lengths[1], 0);
    EXPECT_TRUE(g.off());
    DraftCost pricey = k3();
    pricey.draft_bytes_per_token = 500e9;  // far costlier than the target: not even every draft right would pay
    DraftGate p(pricey, 4);
    lengths = drive(p, 2, 1000);
    EXPECT_GE(lengths[0], 1);
    EXPECT_EQ(lengths[1], 0);
}

TEST(DraftGate, ProbesCostAtMostTwoPercentOfThePlainPassesBetween) {
    // A small model whose experts are most of a pass (24 experts, 4 a token): a verify row costs ~80% of a pass.
    const DraftCost c{1e6, 1e6, 4, 24, 4, 0};
    const double extra = c.pass_bytes(2) / c.pass_bytes(1) - 1.0;
    ASSERT_GT(extra, 0.5);
    DraftGate g(c, 2);
    const auto lengths = drive(g, 1000, 0);
    std::vector<int64_t> drafting;
    for (size_t i = 0; i < lengths.size(); ++i)
        if (lengths[i] > 0) drafting.push_back(int64_t(i));
    ASSERT_GE(drafting.size(), 3u);
    for (size_t i = 2; i < drafting.size(); ++i)  // probes (the first verifies are the warm-up)
        EXPECT_GE(double(drafting[i] - drafting[i - 1]), extra / 0.02) << "probe " << i;
    EXPECT_LE(double(drafting.size()) * extra, 0.02 * 1000 + 2 * extra) << "drafting cost more than 2% in all";
}

TEST(DraftGate, SameHistorySameChoices) {
    DraftGate a(k3(), 5), b(k3(), 5);
    std::vector<int64_t> la, lb;
    for (int i = 0; i < 300; ++i) {
        const int64_t ka = a.next(), kb = b.next();
        la.push_back(ka), lb.push_back(kb);
        const int64_t acc = (i * 7919) % 5;  // any pattern, the same for both
        if (ka > 0) a.record(ka, std::min(ka, acc));
        if (kb > 0) b.record(kb, std::min(kb, acc));
    }
    EXPECT_EQ(la, lb);
}

// DSpark's confidence-scheduled verification with pass bytes as the cost (draft_gate.h, confidence_cut): verify the
// prefix of a block with the most expected tokens per byte; the expected tokens of k drafts are 1 plus the running
// products of the confidences.
TEST(DraftGate, ConfidenceCutKeepsTheDraftsThatPayForTheirRows) {
    // extra rows cost nothing: every draft with a chance to land is kept; after a sure rejection none are
    EXPECT_EQ(confidence_cut(dense(), std::vector<float>{0.3f, 0.2f, 0.9f}), 3);
    EXPECT_EQ(confidence_cut(dense(), std::vector<float>{0.9f, 0.9f, 0.0f, 0.9f}), 2);
    EXPECT_EQ(confidence_cut(dense(), std::vector<float>{}), 0);
    // K3 with its spine counted in full: a draft row adds ~18% to a pass. Survivals 0.9, 0.81, 0.081, 0.073: the
    // first two pay (1.9 tokens for 1.18 passes, 2.71 for 1.36), the third does not (2.79 for 1.54)
    EXPECT_EQ(confidence_cut(k3(), std::vector<float>{0.9f, 0.9f, 0.1f, 0.9f}), 2);
    EXPECT_EQ(confidence_cut(k3(), std::vector<float>(7, 0.95f)), 7);
    EXPECT_EQ(confidence_cut(k3(), std::vector<float>(7, 0.5f)), 2);
    // K3 with its spine in RAM and experts streaming (spine at 1/16): a draft row adds ~77% of a pass, so a lone
    // draft pays only above 0.77
    DraftCost streamed = k3();
    streamed.spine_bytes /= 16;
    EXPECT_EQ(confidence_cut(streamed, std::vector<float>{0.7f}), 0);
    EXPECT_EQ(confidence_cut(streamed, std::vector<float>{0.8f}), 1);
    EXPECT_EQ(confidence_cut(streamed, std::vector<float>(7, 0.95f)), 3);
    EXPECT_EQ(confidence_cut(streamed, std::vector<float>(7, 0.5f)), 0);
    // a non-finite confidence counts as a sure rejection; out-of-range ones are clamped to [0, 1]
    EXPECT_EQ(confidence_cut(dense(), std::vector<float>{0.9f, std::numeric_limits<float>::quiet_NaN(), 0.9f}), 1);
    EXPECT_EQ(confidence_cut(dense(), std::vector<float>{1.5f, -0.5f, 0.9f}), 1);
}
