// The continuous-batching engine on the fixture models: every request's tokens equal generate() of it alone, for any
// mix of concurrent requests, arrival times and batch sizes; admission limits, FIFO order, context clamping, cancel,
// callbacks that stop, stop ids, logit bias, penalties, forward errors and submit errors.
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
#include "../support/reference_decode.h"

using namespace sluice;

namespace {

std::string fixture_dir(const std::string& name) { return std::string(SLUICE_TEST_DATA_DIR) + "/fixtures/" + name; }

// The fixture's two reference prompts, one after the other: ids to cut prompts of any length from.
std::vector<int32_t> fixture_ids(const std::string& name) {
    std::ifstream in(fixture_dir(name) + "/ref.json");
    auto j = nlohmann::json::parse(in);
    auto ids = j["ids"].get<std::vector<int32_t>>();
    auto b = j["ids_b"].get<std::vector<int32_t>>();
    ids.insert(ids.end(), b.begin(), b.end());
    return ids;
}

std::vector<int32_t> cut(const std::vector<int32_t>& ids, size_t from, size_t n) {
    std::vector<int32_t> out;
    for (size_t i = 0; i < n; ++i) out.push_back(ids[(from + i) % ids.size()]);
    return out;
}

// What one request received.
struct Got {
    std::vector<int32_t> ids;
    std::vector<TokenEvent> finals;  // events with finish != none (copied without logits)
    int64_t events = 0;
    std::string error;
    FinishReason finish() const { return finals.empty() ? FinishReason::none : finals.back().finish; }
};

TokenCallback collect(Got& g, std::function<bool(const TokenEvent&)> also = nullptr) {
    return [&g, also](const TokenEvent& ev) {
        ++g.events;
        if (ev.id >= 0) g.ids.push_back(ev.id);
        if (ev.finish != FinishReason::none) {
            TokenEvent copy = ev;
            copy.logits = {};
            g.finals.push_back(copy);
            g.error = ev.error;
        }
        return also ? also(ev) : true;
    };
}

// The request run alone by the plain decode loop (tests/support/reference_decode.h), not by the engine.
test::ReferenceResult alone(Model& m, const RequestParams& p, int64_t max_new_tokens = -1) {
    return test::reference_generate(m, p.prompt, max_new_tokens > 0 ? max_new_tokens : p.max_new_tokens,
                                    p.stop_at_eos, p.sampling);
}

RequestParams greedy(std::vector<int32_t> prompt, int64_t max_new_tokens, bool stop_at_eos = false) {
    RequestParams p;
    p.prompt = std::move(prompt);
    p.max_new_tokens = max_new_tokens;
    p.stop_at_eos = stop_at_eos;
    return p;
}

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
        params[i].drafter = [&truth, i, n_prompt, V](std::span<const int32_t> context, int64_t max_tokens, const SequenceState*) {
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

// ---- behaviour, on one small model

class EngineTest : public ::testing::Test {
  protected:
    void SetUp() override {
        model = load_model(fixture_dir("qwen3_moe_norm_dense"), {.n_threads = 2});
        ids = fixture_ids("qwen3_moe_norm_dense");
    }
    std::unique_ptr<Model> model;
    std::vector<int32_t> ids;
};

// A drafter that throws ends its own request with an error after the pass its decode row is in; the others go on.
TEST_F(EngineTest, AFailingDrafterEndsOnlyItsRequest) {
    Engine engine(*model, {.max_batch_rows = 16, .max_sequences = 4, .max_context_tokens = 512});
    auto bad = greedy(cut(ids, 0, 6), 8);
    bad.draft_tokens = 3;
    int calls = 0;
    bad.drafter = [&calls](std::span<const int32_t>, int64_t, const SequenceState*) -> std::vector<int32_t> {
        if (++calls == 2) throw Error("the draft model is gone");
        return {1, 2};
    };
    const auto good = greedy(cut(ids, 3, 9), 8);
    Got g_bad, g_good;
    engine.submit(bad, collect(g_bad));
    engine.submit(good, collect(g_good));
    engine.run_until_idle();
    EXPECT_EQ(g_bad.finish(), FinishReason::error);
    EXPECT_NE(g_bad.error.find("the draft model is gone"), std::string::npos) << g_bad.error;
    EXPECT_EQ(g_good.ids, alone(*model, good).ids);
    EXPECT_EQ(g_good.finish(), FinishReason::length);
}

TEST_F(EngineTest, NeverMoreThanMaxSequencesRunning) {
    Engine engine(*model, {.max_batch_rows = 16, .max_sequences = 2, .max_context_tokens = 4096});
    std::vector<Got> got(5);
    int64_t max_running = 0, max_waiting = 0;
    auto watch = [&](const TokenEvent&) {
        const EngineStats s = engine.stats();
        max_running = std::max(max_running, s.running);
        max_waiting = std::max(max_waiting, s.waiting);
        return true;
    };
    for (size_t i = 0; i < got.size(); ++i) engine.submit(greedy(cut(ids, i, 4 + i), 6), collect(got[i], watch));
    engine.run_until_idle();
    EXPECT_EQ(max_running, 2);
    EXPECT_EQ(max_waiting, 3);
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].ids, alone(*model, greedy(cut(ids, i, 4 + i), 6)).ids);
}

// Fewer rows per step than sequences: decode rows come first, prompts wait for free rows; no step exceeds the rows.
TEST_F(EngineTest, FewerRowsThanSequences) {
    Engine engine(*model, {.max_batch_rows = 2, .max_sequences = 5, .max_context_tokens = 4096});
    std::vector<Got> got(5);
    for (size_t i = 0; i < got.size(); ++i) engine.submit(greedy(cut(ids, 2 * i, 1 + i), 6), collect(got[i]));
    engine.run_until_idle();
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].ids, alone(*model, greedy(cut(ids, 2 * i, 1 + i), 6)).ids);
    const EngineStats s = engine.stats();
    EXPECT_EQ(s.rows, 15 + 5 * 5);
    EXPECT_LE(s.rows, 2 * s.steps);
}

// The head of the queue waits until its tokens fit; a later, smaller request must not overtake it.
TEST_F(EngineTest, AdmissionByTokensIsFifo) {
    Engine engine(*model, {.max_batch_rows = 64, .max_sequences = 8, .max_context_tokens = 40});
    std::vector<int> first_event_order;
    std::vector<Got> got(3);
    auto order = [&](int who) {
        return [&, who](const TokenEvent& ev) {
            if (ev.n_generated == 1) first_event_order.push_back(who);
            return true;
        };
    };
    engine.submit(greedy(cut(ids, 0, 10), 10), collect(got[0], order(0)));  // reserves 20
    engine.submit(greedy(cut(ids, 5, 10), 15), collect(got[1], order(1)));  // 25: waits for 0
    engine.submit(greedy(cut(ids, 9, 2), 2), collect(got[2], order(2)));    // 4: would fit, must not overtake 1
    engine.step();
    EXPECT_EQ(engine.stats().running, 1);
    EXPECT_EQ(engine.stats().waiting, 2);
    engine.run_until_idle();
    EXPECT_EQ(first_event_order, (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(got[1].ids, alone(*model, greedy(cut(ids, 5, 10), 15)).ids);
}

// A request with a long completion reserves only what it has used (plus a step), so a short request submitted after
// it runs beside it instead of waiting for the whole long completion.
TEST_F(EngineTest, ALongRequestDoesNotHoldTheContext) {
    Engine engine(*model, {.max_batch_rows = 64, .max_sequences = 4, .max_context_tokens = 120,
                           .reserve_step_tokens = 8});
    std::vector<int> finished;
    auto note = [&](int who) {
        return [&, who](const TokenEvent& ev) {
            if (ev.finish != FinishReason::none) finished.push_back(who);
            return true;
        };
    };
    Got longer, shorter;
    engine.submit(greedy(cut(ids, 0, 10), 100), collect(longer, note(0)));  // 110 of 120
    engine.submit(greedy(cut(ids, 3, 6), 6), collect(shorter, note(1)));    // + 12: admitted at once all the same
    engine.step();
    EXPECT_EQ(engine.stats().running, 2);
    engine.run_until_idle();
    EXPECT_EQ(finished, (std::vector<int>{1, 0}));
    EXPECT_EQ(engine.stats().preemptions, 0);
    EXPECT_EQ(longer.ids, alone(*model, greedy(cut(ids, 0, 10), 100)).ids);
    EXPECT_EQ(shorter.ids, alone(*model, greedy(cut(ids, 3, 6), 6)).ids);
}

// Cancelling a request while it waits after a preemption ends it with one cancelled event.
TEST_F(EngineTest, CancelAPreemptedRequest) {
    Engine engine(*model, {.max_batch_rows = 64, .max_sequences = 4, .max_context_tokens = 60,
                           .reserve_step_tokens = 4});
    Got a, b;
    engine.submit(greedy(cut(ids, 0, 6), 50), collect(a));
    const uint64_t id_b = engine.submit(greedy(cut(ids, 2, 6), 50), collect(b));
    while (engine.stats().preemptions == 0 && !engine.idle()) engine.step();
    ASSERT_GT(engine.stats().preemptions, 0);
    EXPECT_EQ(engine.stats().waiting, 1);
    engine.cancel(id_b);
    engine.run_until_idle();
    EXPECT_EQ(b.finish(), FinishReason::cancelled);
    EXPECT_EQ(b.finals.size(), 1u);
    EXPECT_EQ(a.ids, alone(*model, greedy(cut(ids, 0, 6), 50)).ids);
}

TEST_F(EngineTest, MaxNewTokensClampedToContextAndPositions) {
    const int64_t max_pos = model->info().max_position_embeddings;
    ASSERT_GT(max_pos, 40);
    Engine engine(*model, {.max_batch_rows = 8, .max_sequences = 4, .max_context_tokens = 20});
    Got a, b;
    engine.submit(greedy(cut(ids, 0, 15), 100), collect(a));
    engine.run_until_idle();
    EXPECT_EQ(a.ids, alone(*model, greedy(cut(ids, 0, 15), 5)).ids);
    EXPECT_EQ(a.finish(), FinishReason::length);

    Engine wide(*model, {.max_batch_rows = 64, .max_sequences = 4, .max_context_tokens = 100000});
    wide.submit(greedy(cut(ids, 0, size_t(max_pos - 3)), 50), collect(b));
    wide.run_until_idle();
    EXPECT_EQ(b.ids.size(), 3u);
    EXPECT_EQ(b.finish(), FinishReason::length);
}

TEST_F(EngineTest, CancelWaitingAndRunning) {
    // one sequence at a time, and a token budget that fits one request only: the third runs only if the cancelled
    // one released its reservation
    Engine engine(*model, {.max_batch_rows = 8, .max_sequences = 1, .max_context_tokens = 64});
    Got a, b, c;
    const uint64_t ia = engine.submit(greedy(cut(ids, 0, 12), 40), collect(a));
    const uint64_t ib = engine.submit(greedy(cut(ids, 3, 5), 4), collect(b));
    for (int i = 0; i < 50 && a.ids.size() < 3 && a.finals.empty(); ++i) engine.step();
    ASSERT_EQ(a.ids.size(), 3u);
    engine.cancel(ib);
    EXPECT_EQ(engine.stats().waiting, 0);
    EXPECT_EQ(b.events, 0) << "events go out on the engine thread, in step()";
    engine.cancel(ia);
    engine.cancel(12345);  // unknown: ignored
    const size_t a_tokens = a.ids.size();
    engine.step();
    EXPECT_EQ(a.ids.size(), a_tokens) << "no token after the cancel";
    ASSERT_EQ(a.finals.size(), 1u);
    EXPECT_EQ(a.finals[0].finish, FinishReason::cancelled);
    EXPECT_EQ(a.finals[0].id, -1);
    ASSERT_EQ(b.events, 1);
    EXPECT_EQ(b.finish(), FinishReason::cancelled);
    EXPECT_TRUE(b.ids.empty());
    EXPECT_EQ(engine.stats().running, 0);

    const uint64_t ic = engine.submit(greedy(cut(ids, 7, 20), 30), collect(c));
    engine.run_until_idle();
    EXPECT_EQ(c.ids, alone(*model, greedy(cut(ids, 7, 20), 30)).ids);
    engine.cancel(ic);  // finished already: no event
    engine.cancel(ia);
    engine.run_until_idle();
    EXPECT_EQ(c.finals.size(), 1u);
    EXPECT_EQ(a.finals.size(), 1u);
}

TEST_F(EngineTest, CancelFromCallbackEndsBeforeTheNextToken) {
    Engine engine(*model, {});
    Got a;
    uint64_t id = 0;
    id = engine.submit(greedy(cut(ids, 0, 6), 20), collect(a, [&](const TokenEvent& ev) {
                           if (ev.n_generated == 2) engine.cancel(id);
                           return true;
                       }));
    engine.run_until_idle();
    EXPECT_EQ(a.ids.size(), 2u);
    EXPECT_EQ(a.finish(), FinishReason::cancelled);
}

TEST_F(EngineTest, CallbackReturningFalseDropsOnlyThatRequest) {
    Engine engine(*model, {.max_batch_rows = 7, .max_sequences = 4, .max_context_tokens = 4096});
    Got a, b;
    engine.submit(greedy(cut(ids, 0, 9), 20), collect(a, [](const TokenEvent& ev) { return ev.n_generated < 3; }));
    engine.submit(greedy(cut(ids, 4, 11), 10), collect(b));
    engine.run_until_idle();
    EXPECT_EQ(a.events, 3);
    EXPECT_TRUE(a.finals.empty());
    const auto want_a = alone(*model, greedy(cut(ids, 0, 9), 3)).ids;
    EXPECT_EQ(a.ids, want_a);
    EXPECT_EQ(b.ids, alone(*model, greedy(cut(ids, 4, 11), 10)).ids);
    EXPECT_TRUE(engine.idle());
}

TEST_F(EngineTest, StopIdEndsWithStop) {
    const auto p = greedy(cut(ids, 2, 8), 12);
    const auto full = alone(*model, p).ids;
    // the first generated id not seen before position k >= 2
    size_t k = 2;
    while (k < full.size() &&
           std::find(full.begin(), full.begin() + ptrdiff_t(k), full[k]) != full.begin() + ptrdiff_t(k))
        ++k;
    ASSERT_LT(k, full.size()) << "the greedy continuation repeats one id; pick another prompt";
    auto q = p;
    q.stop_ids = {full[k]};
    Engine engine(*model, {});
    Got g;
    engine.submit(q, collect(g));
    engine.run_until_idle();
    EXPECT_EQ(g.ids, std::vector<int32_t>(full.begin(), full.begin() + ptrdiff_t(k) + 1));
    EXPECT_EQ(g.finish(), FinishReason::stop);
}

// The model's eos ids (here: a wrapper that declares one the greedy continuation reaches) end a request with
// stop_at_eos, exactly where generate() stops; without stop_at_eos the request runs on.
TEST_F(EngineTest, EosEndsWithStopOnlyWhenAsked) {
    const auto p = greedy(cut(ids, 2, 8), 12);
    const auto full = alone(*model, p).ids;
    size_t k = 1;
    while (k < full.size() &&
           std::find(full.begin(), full.begin() + ptrdiff_t(k), full[k]) != full.begin() + ptrdiff_t(k))
        ++k;
    ASSERT_LT(k, full.size());
    struct EosModel : Model {
        Model& m;
        ModelInfo i;
        EosModel(Model& model, int32_t eos) : m(model), i(model.info()) { i.eos_token_ids = {eos}; }
        const ModelInfo& info() const override { return i; }
        std::unique_ptr<SequenceState> new_sequence() const override { return m.new_sequence(); }
        ExecOptions exec_options() const override { return m.exec_options(); }
        uint64_t activation_bytes(int64_t rows) const override { return m.activation_bytes(rows); }
        void forward(ExecContext& c, const Batch& b, std::span<SequenceState* const> s, std::vector<float>& l) override {
            m.forward(c, b, s, l);
        }
    } eos_model(*model, full[k]);
    Engine engine(eos_model, {});
    Got stops, runs_on;
    auto q = p;
    q.stop_at_eos = true;
    engine.submit(q, collect(stops));
    engine.submit(p, collect(runs_on));
    engine.run_until_idle();
    EXPECT_EQ(stops.ids, std::vector<int32_t>(full.begin(), full.begin() + ptrdiff_t(k) + 1));
    EXPECT_EQ(stops.ids, alone(eos_model, q).ids);
    EXPECT_EQ(stops.finish(), FinishReason::stop);
    EXPECT_EQ(runs_on.ids, full);
    EXPECT_EQ(runs_on.finish(), FinishReason::length);
}

TEST_F(EngineTest, LogitBiasForcesAToken) {
    auto p = greedy(cut(ids, 1, 7), 5);
    const auto plain = alone(*model, p).ids;
    const int32_t forced = plain[0] == 17 ? 18 : 17;
    p.logit_bias[forced] = 100.0f;
    Engine engine(*model, {});
    Got g;
    float seen_logit = 0;
    engine.submit(p, collect(g, [&](const TokenEvent& ev) {
                      seen_logit = ev.logits[size_t(forced)];
                      return true;
                  }));
    engine.run_until_idle();
    EXPECT_EQ(g.ids, std::vector<int32_t>(5, forced));
    EXPECT_GT(seen_logit, 50.0f) << "the event's logits are after the bias";
}

// Penalties by hand: prefill, then each step subtract frequency * count + presence from the raw logits of the ids
// generated so far and take the argmax.
TEST_F(EngineTest, PenaltiesMatchAHandComputation) {
    const auto prompt = cut(ids, 0, 6);
    const int64_t n_new = 12, V = model->info().vocab_size;
    auto by_hand = [&](float frequency, float presence) {
        std::vector<int32_t> out;
        auto seq = model->new_sequence();
        auto ctx = make_exec_context(*model);
        SequenceState* seqs[] = {seq.get()};
        Batch b;
        for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], int64_t(i), 0, i + 1 == prompt.size());
        std::vector<float> logits;
        model->forward(*ctx, b, seqs, logits);
        std::map<int32_t, int> counts;
        for (int64_t step = 0; step < n_new; ++step) {
            std::vector<float> adj(logits.begin(), logits.begin() + V);
            for (auto [id, n] : counts) adj[size_t(id)] -= frequency * float(n) + presence;
            const int32_t id = argmax(adj);
            out.push_back(id);
            ++counts[id];
            b.clear();
            b.add(id, int64_t(prompt.size()) + step, 0, true);
            model->forward(*ctx, b, seqs, logits);
        }
        return out;
    };
    const std::vector<std::pair<float, float>> cases = {{1.5f, 0.75f}, {0.0f, 2.0f}, {0.5f, 0.0f}};
    Engine engine(*model, {.max_batch_rows = 4, .max_sequences = 4, .max_context_tokens = 4096});
    std::vector<Got> got(cases.size());
    Got plain;
    for (size_t i = 0; i < cases.size(); ++i) {
        auto p = greedy(prompt, n_new);
        p.frequency_penalty = cases[i].first;
        p.presence_penalty = cases[i].second;
        engine.submit(p, collect(got[i]));
    }
    engine.submit(greedy(prompt, n_new), collect(plain));  // the same prompt without penalties, alongside
    engine.run_until_idle();
    EXPECT_EQ(plain.ids, alone(*model, greedy(prompt, n_new)).ids);
    for (size_t i = 0; i < cases.size(); ++i) {
        EXPECT_EQ(got[i].ids, by_hand(cases[i].first, cases[i].second)) << "case " << i;
        EXPECT_NE(got[i].ids, plain.ids) << "case " << i << ": penalties should change this greedy continuation";
    }
}

// Forwards to a real model and throws on chosen calls, like an expert read failing.
class FlakyModel : public Model {
  public:
    explicit FlakyModel(Model& m) : m_(m) {}
    const ModelInfo& info() const override { return m_.info(); }
    std::unique_ptr<SequenceState> new_sequence() const override { return m_.new_sequence(); }
    ExecOptions exec_options() const override { return m_.exec_options(); }
    uint64_t activation_bytes(int64_t rows) const override { return m_.activation_bytes(rows); }
    void forward(ExecContext& ctx, const Batch& b, std::span<SequenceState* const> seqs,
                 std::vector<float>& logits) override {
        if (calls++ == fail_at) throw Error("expert read failed: /ssd/experts.bin offset 4096: EIO");
        m_.forward(ctx, b, seqs, logits);
    }
    Model& m_;
    int calls = 0, fail_at = -1;
};

TEST_F(EngineTest, ForwardErrorEndsTheBatchAndTheEngineGoesOn) {
    FlakyModel flaky(*model);
    Engine engine(flaky, {.max_batch_rows = 64, .max_sequences = 4, .max_context_tokens = 4096});
    Got a, b, c;
    engine.submit(greedy(cut(ids, 0, 5), 10), collect(a));
    engine.submit(greedy(cut(ids, 3, 8), 10), collect(b));
    engine.step();
    engine.step();
    flaky.fail_at = flaky.calls;
    engine.step();
    for (Got* g : {&a, &b}) {
        ASSERT_EQ(g->finals.size(), 1u);
        EXPECT_EQ(g->finish(), FinishReason::error);
        EXPECT_EQ(g->finals[0].id, -1);
        EXPECT_NE(g->error.find("EIO"), std::string::npos) << g->error;
        EXPECT_EQ(g->ids.size(), 2u);
    }
    EXPECT_TRUE(engine.idle());
    engine.submit(greedy(cut(ids, 7, 9), 6), collect(c));
    engine.run_until_idle();
    EXPECT_EQ(c.ids, alone(*model, greedy(cut(ids, 7, 9), 6)).ids);
    EXPECT_EQ(c.finish(), FinishReason::length);
}

TEST_F(EngineTest, RunOnItsOwnThread) {
    Engine engine(*model, {.max_batch_rows = 7, .max_sequences = 4, .max_context_tokens = 4096});
    std::atomic<bool> stop{false};
    std::thread t([&] { engine.run(stop); });
    std::vector<Got> got(3);
    std::atomic<int> done{0};
    for (size_t i = 0; i < got.size(); ++i) {
        engine.submit(greedy(cut(ids, 2 * i, 6 + 3 * i), 8), collect(got[i], [&](const TokenEvent& ev) {
                          if (ev.finish != FinishReason::none) ++done;
                          return true;
                      }));
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    for (int i = 0; i < 1000 && done < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    stop = true;
    t.join();
    ASSERT_EQ(done, 3);
    for (size_t i = 0; i < got.size(); ++i)
        EXPECT_EQ(got[i].ids, alone(*model, greedy(cut(ids, 2 * i, 6 + 3 * i), 8)).ids);
}

void expect_error(const std::function<void()>& f, const std::string& part) {
    try {
        f();
        ADD_FAILURE() << "no error; expected one mentioning '" << part << "'";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
}

TEST_F(EngineTest, SubmitErrorsNameTheProblem) {
    Engine engine(*model, {.max_batch_rows = 8, .max_sequences = 2, .max_context_tokens = 32});
    const int64_t V = model->info().vocab_size;
    auto sub = [&](RequestParams p) {
        return [&engine, p] { engine.submit(p, [](const TokenEvent&) { return true; }); };
    };
    expect_error(sub(greedy({}, 4)), "empty");
    expect_error(sub(greedy(cut(ids, 0, 32), 4)), "max_context_tokens");
    expect_error(sub(greedy({1, int32_t(V)}, 4)), "vocabulary");
    expect_error(sub(greedy({-1}, 4)), "vocabulary");
    expect_error(sub(greedy({1, 2}, -1)), "max_new_tokens");
    auto hot = greedy({1, 2}, 4);
    hot.sampling.temperature = -1;
    expect_error(sub(hot), "temperature");
    auto topp = greedy({1, 2}, 4);
    topp.sampling.top_p = 0;
    expect_error(sub(topp), "top-p");
    auto bias = greedy({1, 2}, 4);
    bias.logit_bias[int32_t(V) + 5] = 1;
    expect_error(sub(bias), "logit_bias");
    auto nan_penalty = greedy({1, 2}, 4);
    nan_penalty.presence_penalty = std::nanf("");
    expect_error(sub(nan_penalty), "presence_penalty");
    Engine wide(*model, {.max_batch_rows = 8, .max_sequences = 2, .max_context_tokens = 100000});
    const auto pos = model->info().max_position_embeddings;
    expect_error([&] { wide.submit(greedy(cut(ids, 0, size_t(pos)), 1), [](const TokenEvent&) { return true; }); },
                 "max_position_embeddings");
    EXPECT_TRUE(engine.idle());
    expect_error([&] { Engine bad(*model, {.max_batch_rows = 0}); }, "max_batch_rows");
    EXPECT_STREQ(to_string(FinishReason::length), "length");
    EXPECT_STREQ(to_string(FinishReason::cancelled), "cancelled");
    EXPECT_STREQ(to_string(FinishReason::none), "");
}

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
