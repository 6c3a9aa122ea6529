// The continuous-batching engine on the fixture models: every request's tokens equal generate() of it alone, for any
// mix of concurrent requests, arrival times and batch sizes, with preemption by recompute; the memory plan's
// reservations. (Admission, cancel, callbacks, stop ids, logit bias, penalties and errors: test_engine_requests.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"
#include "models/model.h"
#include "ops/exec_context.h"
#include "runtime/engine.h"
#include "runtime/generate.h"
#include "../support/engine_requests.h"

using namespace sluice;
using namespace sluice::test;

namespace {

// ---- bit identity with generate(), per architecture and batch size

struct MixCase {
    std::string fixture;
    int64_t max_batch_rows;
};

void PrintTo(const MixCase& c, std::ostream* os) { *os << c.fixture << ", max_batch_rows " << c.max_batch_rows; }

class EngineMix : public ::testing::TestWithParam<MixCase> {};

TEST_P(EngineMix, EveryRequestMatchesGenerateAlone) {
    const auto& c = GetParam();
    auto model = load_model(fixture_dir(c.fixture), {.n_threads = 2});
    const auto ids = fixture_ids(c.fixture);
    // prompt length, max_new_tokens, temperature, seed, top_k, stop_at_eos, submitted before step #
    struct Spec {
        size_t len;
        int64_t max_new;
        float temperature;
        uint64_t seed;
        int64_t top_k;
        bool eos;
        int64_t at_step;
        int64_t drafts;  // > 0: speculative, with an oracle drafter (every third draft wrong); < 0: prompt lookup
    };
    const std::vector<Spec> specs = {{17, 9, 0.0f, 0, 0, false, 0, 3},   {1, 12, 0.9f, 7, 0, true, 0, 0},
                                     {40, 5, 0.0f, 0, 0, true, 0, -4},   {5, 1, 1.3f, 3, 20, false, 2, 0},
                                     {28, 14, 0.7f, 11, 0, false, 2, 0}, {3, 7, 0.0f, 0, 0, false, 5, 0},
                                     {9, 11, 0.0f, 0, 0, false, 1, 5}};
    std::vector<RequestParams> params;
    for (size_t i = 0; i < specs.size(); ++i) {
        RequestParams p = greedy(cut(ids, 3 * i, specs[i].len), specs[i].max_new, specs[i].eos);
        p.sampling.temperature = specs[i].temperature;
        p.sampling.seed = specs[i].seed;
        p.sampling.top_k = specs[i].top_k;
        params.push_back(p);
    }
    // drafting requests: decided while other requests share their passes, yet exactly their plain tokens
    std::vector<std::vector<int32_t>> truth(specs.size());
    const int64_t V = model->info().vocab_size;
    for (size_t i = 0; i < specs.size(); ++i) {
        if (specs[i].drafts == 0) continue;
        params[i].draft_tokens = std::abs(specs[i].drafts);
        if (specs[i].drafts < 0) continue;
        truth[i] = alone(*model, params[i]).ids;
        const size_t n_prompt = params[i].prompt.size();
        params[i].drafter = [&truth, i, n_prompt, V](std::span<const int32_t> context, int64_t max_tokens, const SequenceState*, const DraftPick*) {
            std::vector<int32_t> d;
            for (size_t j = context.size() - n_prompt; j < truth[i].size() && int64_t(d.size()) < max_tokens; ++j)
                d.push_back(j % 3 == 2 ? int32_t((truth[i][j] + 1) % V) : truth[i][j]);
            return d;
        };
    }
    Engine engine(*model, {.max_batch_rows = c.max_batch_rows, .max_sequences = 4, .max_context_tokens = 4096});
    std::vector<Got> got(specs.size());
    size_t next = 0;
    for (int64_t step = 0; next < specs.size() || !engine.idle(); ++step) {
        while (next < specs.size() && specs[next].at_step <= step) {
            engine.submit(params[next], collect(got[next]));
            ++next;
        }
        engine.step();
    }
    int64_t generated = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
        const auto want = alone(*model, params[i]);
        EXPECT_EQ(got[i].ids, want.ids) << "request " << i;
        ASSERT_EQ(got[i].finals.size(), 1u) << "request " << i;
        EXPECT_EQ(got[i].finish(), want.stop_reason == "eos" ? FinishReason::stop : FinishReason::length);
        EXPECT_EQ(got[i].finals[0].n_generated, int64_t(want.ids.size()));
        EXPECT_EQ(got[i].finals[0].n_prompt, int64_t(specs[i].len));
        generated += int64_t(want.ids.size());
    }
    const EngineStats s = engine.stats();
    EXPECT_EQ(s.generated_tokens, generated);
    EXPECT_EQ(s.prompt_tokens, 17 + 1 + 40 + 5 + 28 + 3 + 9);
    if (c.max_batch_rows > 1) {  // one row a pass leaves no room for drafts
        EXPECT_GT(s.accepted, 0);
        EXPECT_LT(s.accepted, s.drafted);
    }
    EXPECT_EQ(s.running, 0);
    EXPECT_EQ(s.waiting, 0);
    EXPECT_GT(s.forward_ms, 0.0);
    if (c.max_batch_rows > 1) {
        EXPECT_LT(s.steps * 2, s.rows) << "rows of several requests should share steps";
    }
}

std::vector<MixCase> mix_cases() {
    std::vector<MixCase> out;
    for (const char* f : {"dsv3_fp8_block128", "k2_thinking_int4", "kimi_linear_noqlora", "kimi_k3_attnres_mxfp4",
                          "gpt_oss_swa_sinks_mxfp4", "qwen3_moe_norm_dense", "mixtral_hub"})
        for (int64_t rows : {1, 7, 512}) out.push_back({f, rows});
    return out;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EngineMix, ::testing::ValuesIn(mix_cases()),
                         [](const ::testing::TestParamInfo<MixCase>& info) {
                             return info.param.fixture + "_rows" + std::to_string(info.param.max_batch_rows);
                         });

// ---- admission that grows reservations, and preemption by recompute

struct PreemptCase {
    std::string fixture;
    bool prefix_cache = false;
};
void PrintTo(const PreemptCase& c, std::ostream* os) { *os << c.fixture << (c.prefix_cache ? " +cache" : ""); }
class EnginePreempt : public ::testing::TestWithParam<PreemptCase> {};

// Four requests whose completions cannot all fit the context at once: they are admitted with small reservations,
// grow, and the youngest are preempted and recomputed; every request's tokens still equal running it alone (greedy,
// sampled with a seed, and speculating).
TEST_P(EnginePreempt, PreemptedRequestsMatchGenerateAlone) {
    const PreemptCase& c = GetParam();
    auto model = load_model(fixture_dir(c.fixture), {.n_threads = 2});
    ASSERT_TRUE(model->recompute_is_exact());
    const auto ids = fixture_ids(c.fixture);
    EngineOptions o{.max_batch_rows = 32, .max_sequences = 4, .max_context_tokens = 100,
                    .prefix_cache_bytes = c.prefix_cache ? uint64_t(8) << 20 : 0, .reserve_step_tokens = 8};
    Engine engine(*model, o);
    std::vector<RequestParams> reqs;
    for (int i = 0; i < 4; ++i) {
        RequestParams p = greedy(cut(ids, size_t(i) * 3, 8), 40);  // 48 tokens each, 192 against 100
        if (i % 2 == 1) {
            p.sampling.temperature = 0.9f;
            p.sampling.seed = 11 + uint64_t(i);
        }
        reqs.push_back(p);
    }
    reqs[2].draft_tokens = 2;
    std::vector<Got> got(reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i) engine.submit(reqs[i], collect(got[i]));
    engine.run_until_idle();
    const EngineStats s = engine.stats();
    EXPECT_GT(s.preemptions, 0);
    EXPECT_GT(s.recomputed_tokens + s.prefix_cache.hits, 0);
    reqs[2].draft_tokens = 0;  // greedy with drafts gives the tokens of greedy without them
    for (size_t i = 0; i < reqs.size(); ++i) {
        EXPECT_EQ(got[i].finish(), FinishReason::length) << i << " " << got[i].error;
        EXPECT_EQ(got[i].ids, alone(*model, reqs[i]).ids) << "request " << i;
        ASSERT_FALSE(got[i].finals.empty());
        EXPECT_EQ(got[i].finals.back().n_prompt, 8) << "usage counts the prompt once";
    }
    EXPECT_EQ(s.prompt_tokens + s.cached_prompt_tokens, 4 * 8) << "recomputed rows are not prompt tokens";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EnginePreempt,
                         ::testing::Values(PreemptCase{"qwen3_moe_norm_dense"}, PreemptCase{"qwen3_moe_norm_dense", true},
                                           PreemptCase{"kimi_linear_noqlora"}, PreemptCase{"kimi_linear_noqlora", true},
                                           PreemptCase{"kimi_k3_attnres_mxfp4"}, PreemptCase{"dsv3_fp8_block128"}),
                         [](const ::testing::TestParamInfo<PreemptCase>& info) {
                             return info.param.fixture + (info.param.prefix_cache ? "_cache" : "");
                         });

// The memory plan reserves Kimi's fixed recurrent state once per parallel sequence, per-token caches once in all.
TEST(EngineMemoryPlan, FixedStateReservedPerSequence) {
    auto plan_state = [](const std::string& f, int64_t n) {
        LoadOptions o;
        o.n_threads = 1;
        o.memory_budget_bytes = uint64_t(1) << 30;
        o.max_sequences = n;
        auto m = load_model(fixture_dir(f), o);
        return std::make_pair(m->residency()->state_bytes, m->new_sequence());
    };
    auto [one, seq] = plan_state("kimi_linear_noqlora", 1);
    auto [four, seq4] = plan_state("kimi_linear_noqlora", 4);
    // each sequence: its fixed KDA state (all a fresh one holds) and the partly empty last page of its caches
    const uint64_t page = uint64_t(PagedRows::k_page_rows) * seq->layout().bytes_per_token();
    EXPECT_EQ(four - one, 3 * (seq->size_bytes() + page)) << "a fresh Kimi sequence holds exactly its fixed KDA state";
    EXPECT_GT(seq->size_bytes(), 0u);
    auto [ds1, ds_seq] = plan_state("dsv3_fp8_block128", 1);
    EXPECT_EQ(plan_state("dsv3_fp8_block128", 4).first - ds1,
              3 * uint64_t(PagedRows::k_page_rows) * ds_seq->layout().bytes_per_token());
}

// Snapshots of recurrent state (the prefix cache at a prompt's last chunk, speculation) are in the plan: a copy per
// sequence and the journal of one pass's rows, measured against what a real snapshot and journal hold.
TEST(EngineMemoryPlan, SnapshotsReserved) {
    auto plan = [](const std::string& f, int64_t rows) {
        LoadOptions o;
        o.n_threads = 1;
        o.memory_budget_bytes = uint64_t(1) << 30;
        o.max_sequences = 3;
        o.snapshot_rows = rows;
        auto m = load_model(fixture_dir(f), o);
        return std::make_pair(m->residency()->state_bytes, std::move(m));
    };
    auto planned = plan("kimi_linear_noqlora", 0);  // no structured binding: clang 14 cannot capture one
    const uint64_t without = planned.first;
    std::unique_ptr<Model>& model = planned.second;
    const uint64_t with = plan("kimi_linear_noqlora", 20).first;
    // a real snapshot with 20 journaled rows: what it adds to a sequence's bytes
    auto seq = model->new_sequence();
    auto ctx = make_exec_context(*model);
    const auto ids = fixture_ids("kimi_linear_noqlora");
    const auto run = [&](size_t from, size_t n) {
        Batch b;
        for (size_t i = 0; i < n; ++i) b.add(ids[(from + i) % ids.size()], seq->n_past() + int64_t(i), 0, i + 1 == n);
        std::vector<float> logits;
        SequenceState* s = seq.get();
        model->forward(*ctx, b, std::span<SequenceState* const>(&s, 1), logits);
    };
    run(0, 4);
    const uint64_t before = seq->size_bytes();
    seq->snapshot();
    run(4, 20);
    // what the snapshot added: 24 rows still fit the first page of every per-token cache, and the 20 token ids
    const uint64_t added = seq->size_bytes() - before - 20 * sizeof(int32_t);
    EXPECT_EQ(added, seq->layout().recurrent_bytes() + 20 * seq->layout().journal_bytes_per_row());
    EXPECT_EQ(with - without, 2 * seq->layout().recurrent_bytes() + added);  // 3 copies, one journal of 20 rows
    // no recurrent state: nothing more
    EXPECT_EQ(plan("dsv3_fp8_block128", 20).first, plan("dsv3_fp8_block128", 0).first);
}

}  // namespace
