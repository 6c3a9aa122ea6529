// The continuous-batching engine's behaviour on one small model: admission limits, FIFO order, context clamping,
// cancel, callbacks that stop, stop ids, logit bias, penalties, a failing drafter, forward errors and submit errors.
// (Bit identity with generate() across architectures and batch sizes: test_engine.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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
    bad.drafter = [&calls](std::span<const int32_t>, int64_t, const SequenceState*, const DraftPick*) -> std::vector<int32_t> {
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

}  // namespace
