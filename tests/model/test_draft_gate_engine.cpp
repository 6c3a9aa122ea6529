// The pays-off gate in the engine (RequestParams::draft_gate): greedy tokens stay exactly those of plain decoding;
// drafts that keep failing are switched off, drafts that keep landing are not; a sampled request's tokens with the
// gate do not depend on what else is in the batch.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "models/model.h"
#include "runtime/draft_gate.h"
#include "runtime/engine.h"
#include "../support/reference_decode.h"

using namespace sluice;

namespace {

const std::string kFixture = std::string(SLUICE_TEST_DATA_DIR) + "/fixtures/qwen3_moe_norm_dense";

std::vector<int32_t> prompt_ids() {
    std::ifstream in(kFixture + "/ref.json");
    auto ids = nlohmann::json::parse(in)["ids"].get<std::vector<int32_t>>();
    ids.resize(std::min<size_t>(ids.size(), 8));
    return ids;
}

struct Outcome {
    std::vector<int32_t> ids;
    EngineStats stats;
};

Outcome run(Model& m, const std::vector<RequestParams>& reqs, size_t watch = 0) {
    Engine e(m, {.max_batch_rows = 32, .max_sequences = 4, .max_context_tokens = 256});
    Outcome out;
    for (size_t i = 0; i < reqs.size(); ++i)
        e.submit(reqs[i], [&out, i, watch](const TokenEvent& ev) {
            if (i == watch && ev.id >= 0) out.ids.push_back(ev.id);
            return true;
        });
    e.run_until_idle();
    out.stats = e.stats();
    return out;
}

class DraftGateEngine : public ::testing::Test {
protected:
    static void SetUpTestSuite() { model_ = load_model(kFixture, {.n_threads = 2}).release(); }
    static void TearDownTestSuite() { delete model_; }
    static Model* model_;

    RequestParams request(bool gate, Drafter drafter) const {
        RequestParams p;
        p.prompt = prompt_ids();
        p.max_new_tokens = 64;
        p.stop_at_eos = false;
        p.draft_tokens = 4;
        p.draft_gate = gate;
        p.drafter = std::move(drafter);
        return p;
    }
};
Model* DraftGateEngine::model_ = nullptr;

// Proposes tokens that greedy decoding never picks next: the context's last token + 1, over and over.
Drafter wrong(int64_t vocab) {
    return [vocab](std::span<const int32_t> ctx, int64_t k, const SequenceState*, const DraftPick*) {
        return std::vector<int32_t>(size_t(k), int32_t((ctx.back() + 1) % vocab));
    };
}

}  // namespace

TEST_F(DraftGateEngine, FailingDraftsAreSwitchedOffAndTokensStayExact) {
    const auto p = request(true, wrong(model_->info().vocab_size));
    const auto truth = test::reference_generate(*model_, p.prompt, p.max_new_tokens, false).ids;
    const Outcome gated = run(*model_, {p});
    RequestParams ungated_p = p;
    ungated_p.draft_gate = false;
    const Outcome ungated = run(*model_, {ungated_p});
    EXPECT_EQ(gated.ids, truth);
    EXPECT_EQ(ungated.ids, truth);
    EXPECT_GT(gated.stats.gate_off_steps, 20);
    EXPECT_EQ(ungated.stats.gate_off_steps, 0);
    EXPECT_LT(gated.stats.drafted * 3, ungated.stats.drafted) << "the gate kept verifying drafts that always fail";
    // every decode step either verified drafts or was gated off, but the last (nothing left to draft for)
    EXPECT_GE(gated.stats.decode_steps, gated.stats.verify_steps + gated.stats.gate_off_steps);
    EXPECT_LE(gated.stats.decode_steps, gated.stats.verify_steps + gated.stats.gate_off_steps + 1);
}

TEST_F(DraftGateEngine, LandingDraftsStayOn) {
    const auto base = request(true, nullptr);
    const auto truth = test::reference_generate(*model_, base.prompt, base.max_new_tokens, false).ids;
    const size_t n_prompt = base.prompt.size();
    RequestParams p = base;
    // the true continuation
    p.drafter = [truth, n_prompt](std::span<const int32_t> ctx, int64_t k, const SequenceState*, const DraftPick*) {
        std::vector<int32_t> d;
        for (size_t i = ctx.size() - n_prompt; i < truth.size() && int64_t(d.size()) < k; ++i) d.push_back(truth[i]);
        return d;
    };
    const Outcome r = run(*model_, {p});
    EXPECT_EQ(r.ids, truth);
    EXPECT_EQ(r.stats.gate_off_steps, 0);
    EXPECT_EQ(r.stats.accepted, r.stats.drafted);
    EXPECT_LT(r.stats.decode_steps, int64_t(truth.size()) / 2) << "accepted drafts should cut the passes";
}

TEST_F(DraftGateEngine, SampledTokensDoNotDependOnTheBatch) {
    RequestParams p = request(true, wrong(model_->info().vocab_size));
    p.sampling.temperature = 0.9f;
    p.sampling.seed = 7;
    const Outcome alone = run(*model_, {p});
    std::vector<RequestParams> crowd{p};
    for (int i = 0; i < 3; ++i) {
        RequestParams o = request(i != 1, wrong(model_->info().vocab_size));
        o.prompt.push_back(int32_t(i + 1));
        o.max_new_tokens = 20 + 9 * i;
        crowd.push_back(o);
    }
    const Outcome together = run(*model_, crowd, 0);
    ASSERT_EQ(alone.ids.size(), 64u);
    EXPECT_EQ(together.ids, alone.ids);
    EXPECT_GT(alone.stats.gate_off_steps, 0);
}

// Where the bytes come from (draft_cost): held in RAM with nothing streaming, every byte counts alike; under a budget
// that streams the experts, the resident spine costs kRamByteWeight of a drive byte, so the union of the drafts'
// experts weighs more against it and the same acceptance buys less.
TEST(DraftCostTest, RamBytesWeighLessWhenTheExpertsStream) {
    auto held = load_model(kFixture, {.n_threads = 1});
    const ModelInfo& info = held->info();
    const DraftCost all = draft_cost(*held, 0);
    EXPECT_EQ(ram_byte_weight(*held), 1.0);
    EXPECT_DOUBLE_EQ(all.spine_bytes, double(info.spine_bytes));
    EXPECT_DOUBLE_EQ(all.expert_bytes, double(info.expert_bytes));

    LoadOptions lo{.n_threads = 1};
    lo.memory_budget_bytes = info.spine_bytes + info.routed_expert_bytes_total + (uint64_t(64) << 20);
    const uint64_t other = lo.memory_budget_bytes - load_model(kFixture, lo)->residency()->expert_cache_bytes;
    lo.memory_budget_bytes = other + info.routed_expert_bytes_total / 2;  // room for half the experts: they stream
    auto streamed = load_model(kFixture, lo);
    ASSERT_NE(streamed->residency(), nullptr);
    ASSERT_LT(streamed->residency()->expert_cache_bytes, info.routed_expert_bytes_total);
    EXPECT_EQ(ram_byte_weight(*streamed), kRamByteWeight);
    const DraftCost drive = draft_cost(*streamed, 0);
    EXPECT_DOUBLE_EQ(drive.spine_bytes, kRamByteWeight * double(info.spine_bytes));  // no spine layer streams here
    EXPECT_DOUBLE_EQ(drive.expert_bytes, double(info.expert_bytes));
    DraftGate g_all(all, 4), g_drive(drive, 4);
    EXPECT_LT(g_drive.gain(2), g_all.gain(2));
    // a draft model held in RAM costs the same fraction of its bytes
    EXPECT_DOUBLE_EQ(draft_pass_bytes(*held, kRamByteWeight),
                     kRamByteWeight * (double(info.spine_bytes) + double(info.n_moe_layers * info.num_experts_per_tok) *
                                                                     double(info.expert_bytes)));
}
