// /v1/completions scoring for evaluation harnesses, on the trained model (models/sluice-k2-tiny, a real tokenizer):
// echo with logprobs gives each prompt token's log-probability equal to log_softmax of what prompt_logits (the
// `sluice logits` computation) gives, a null first entry, top_logprobs dicts and byte text offsets; several prompts
// (token-id lists, strings) become choices in index order and are scored in shared forward passes; max_tokens 0
// runs only the prompt.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <thread>

#include "api/completion_job.h"
#include "models/model.h"
#include "runtime/engine.h"
#include "runtime/generate.h"
#include "tokenizer/tokenizer.h"

using namespace sluice;
using namespace sluice::api;
using nlohmann::json;

namespace {

struct Loaded {
    std::string dir = std::string(SLUICE_SOURCE_DIR) + "/models/sluice-k2-tiny";
    std::unique_ptr<Model> model = load_model(dir, {.n_threads = 2});
    std::unique_ptr<tok::Tokenizer> tok = tok::load_tokenizer(dir);
};

Loaded& loaded() {
    static Loaded l;
    return l;
}

// Runs one request to the end on a fresh engine; returns the response body and the engine's stats.
json run(const json& body, EngineStats* stats = nullptr, int64_t max_sequences = 16) {
    Loaded& l = loaded();
    Engine engine(*l.model, {.max_batch_rows = 512, .max_sequences = max_sequences, .max_context_tokens = 4096});
    const ModelContext ctx = make_model_context(engine, *l.tok, nullptr, "m", 64);
    CompletionJob job(engine, *l.tok, parse_request(Endpoint::completions, body, ctx));
    engine.run_until_idle();
    json out = job.wait_result(std::chrono::steady_clock::now() + std::chrono::seconds(60));
    if (stats) *stats = engine.stats();
    return out;
}

// log_softmax(logits)[id] in double: what a client computes from `sluice logits` output.
double log_prob(const float* row, int64_t V, int32_t id) {
    double mx = -INFINITY, sum = 0;
    for (int64_t i = 0; i < V; ++i) mx = std::max(mx, double(row[i]));
    for (int64_t i = 0; i < V; ++i) sum += std::exp(double(row[i]) - mx);
    return double(row[id]) - mx - std::log(sum);
}

// The choice's prompt part must hold exactly the prompt's tokens, scored as prompt_logits scores them alone.
void expect_scored(const json& choice, const std::vector<int32_t>& prompt) {
    Loaded& l = loaded();
    const int64_t V = l.model->info().vocab_size;
    const std::vector<float> logits = prompt_logits(*l.model, prompt, 512);
    const json& lp = choice["logprobs"];
    ASSERT_GE(lp["tokens"].size(), prompt.size());
    EXPECT_TRUE(lp["token_logprobs"][0].is_null());
    EXPECT_TRUE(lp["top_logprobs"][0].is_null());
    EXPECT_EQ(lp["tokens"][0], l.tok->decode({prompt[0]}));
    size_t offset = 0;
    for (size_t i = 0; i < prompt.size(); ++i) {
        EXPECT_EQ(lp["text_offset"][i], offset) << i;
        offset += l.tok->decode_bytes({prompt[i]}).size();
        EXPECT_EQ(lp["tokens"][i], l.tok->decode({prompt[i]})) << i;
        if (i == 0) continue;
        const double want = log_prob(logits.data() + (i - 1) * size_t(V), V, prompt[i]);
        EXPECT_NEAR(lp["token_logprobs"][i].get<double>(), want, 1e-9) << "prompt token " << i;
        const json& top = lp["top_logprobs"][i];
        ASSERT_TRUE(top.is_object()) << i;
        EXPECT_GE(top.size(), 1u);
        EXPECT_LE(top.size(), 2u);  // logprobs 1: the most likely token and the prompt's own
        double best = -INFINITY;
        for (const auto& [tok, v] : top.items()) best = std::max(best, v.get<double>());
        EXPECT_GE(best, want - 1e-12);
        EXPECT_EQ(top[lp["tokens"][i].get<std::string>()].get<double>(), lp["token_logprobs"][i].get<double>());
    }
}

TEST(EchoScoring, TokenPromptsEqualPromptLogits) {
    const std::vector<int32_t> a = {0, 512, 77, 1500, 9, 300}, b = {0, 42, 42, 42}, c = {7, 3000};
    const json r = run({{"model", "m"}, {"prompt", {a, b, c}}, {"echo", true}, {"logprobs", 1},
                        {"max_tokens", 1}, {"temperature", 0}});
    ASSERT_EQ(r["choices"].size(), 3u);
    const std::vector<int32_t>* prompts[] = {&a, &b, &c};
    for (size_t k = 0; k < 3; ++k) {
        const json& ch = r["choices"][k];
        EXPECT_EQ(ch["index"], k);
        const auto& p = *prompts[k];
        EXPECT_EQ(ch["logprobs"]["tokens"].size(), p.size() + 1);  // the prompt, then the one generated token
        expect_scored(ch, p);
        // the generated token is the greedy one after the prompt alone
        GenerateOptions g;
        g.max_new_tokens = 1;
        g.sampling.temperature = 0;
        const GenerateResult want = generate(*loaded().model, p, g);
        std::string text = loaded().tok->decode(p, true) + loaded().tok->decode(want.ids, true);
        EXPECT_EQ(ch["text"], text);
    }
    EXPECT_EQ(r["usage"]["prompt_tokens"], a.size() + b.size() + c.size());
    EXPECT_EQ(r["usage"]["completion_tokens"], 3);
}

TEST(EchoScoring, StringPromptsAndMaxTokensZero) {
    const json r = run({{"model", "m"}, {"prompt", {"The cat sat on the mat.", "Once upon a time"}},
                        {"echo", true}, {"logprobs", 1}, {"max_tokens", 0}});
    ASSERT_EQ(r["choices"].size(), 2u);
    const char* texts[] = {"The cat sat on the mat.", "Once upon a time"};
    for (size_t k = 0; k < 2; ++k) {
        const json& ch = r["choices"][k];
        const auto ids = loaded().tok->encode(texts[k], true);
        EXPECT_EQ(ch["text"], texts[k]);  // a string prompt echoes as sent
        EXPECT_EQ(ch["finish_reason"], "length");
        EXPECT_EQ(ch["logprobs"]["tokens"].size(), ids.size());  // no generated token
        expect_scored(ch, ids);
    }
    EXPECT_EQ(r["usage"]["completion_tokens"], 0);
    // max_tokens 0 without echo: an empty completion
    const json e = run({{"model", "m"}, {"prompt", "Hello"}, {"max_tokens", 0}});
    EXPECT_EQ(e["choices"][0]["text"], "");
    EXPECT_EQ(e["choices"][0]["finish_reason"], "length");
}

TEST(EchoScoring, ManyPromptsShareForwardPasses) {
    json prompts = json::array();
    for (int k = 0; k < 12; ++k) prompts.push_back({0, 100 + k, 200 + 3 * k, 7, 1000 + k});
    EngineStats together, alone;
    const json r = run({{"model", "m"}, {"prompt", prompts}, {"echo", true}, {"logprobs", 0}, {"max_tokens", 0}},
                       &together);
    // one sequence at a time: one pass per prompt
    const json s = run({{"model", "m"}, {"prompt", prompts}, {"echo", true}, {"logprobs", 0}, {"max_tokens", 0}},
                       &alone, 1);
    EXPECT_EQ(together.steps, 1) << "12 prompts of 5 tokens fit one pass of 512 rows";
    EXPECT_EQ(alone.steps, 12);
    ASSERT_EQ(r["choices"].size(), 12u);
    for (size_t k = 0; k < 12; ++k) {
        EXPECT_EQ(r["choices"][k]["logprobs"], s["choices"][k]["logprobs"]) << k;  // batching changes no bit
        expect_scored(r["choices"][k], prompts[k].get<std::vector<int32_t>>());
    }
}

// With the engine running on its own thread (as in the server), a request's prompts still start in one pass: they are
// queued together (Engine::submit_all), not one by one while the engine steps.
TEST(EchoScoring, PromptsQueuedTogetherWhileTheEngineRuns) {
    Loaded& l = loaded();
    Engine engine(*l.model, {.max_batch_rows = 512, .max_sequences = 16, .max_context_tokens = 4096});
    std::atomic<bool> stop{false};
    std::thread runner([&] { engine.run(stop); });
    json prompts = json::array();
    for (int k = 0; k < 16; ++k) prompts.push_back({0, 300 + k, 5, 6, 7, 8});
    const ModelContext ctx = make_model_context(engine, *l.tok, nullptr, "m", 64);
    json r;
    for (int round = 0; round < 5; ++round) {
        const int64_t before = engine.stats().steps;
        CompletionJob job(engine, *l.tok,
                          parse_request(Endpoint::completions,
                                        json{{"model", "m"}, {"prompt", prompts}, {"echo", true}, {"logprobs", 1},
                                             {"max_tokens", 0}},
                                        ctx));
        r = job.wait_result(std::chrono::steady_clock::now() + std::chrono::seconds(60));
        // the step's counters are updated just after its callbacks ran
        for (int i = 0; i < 500 && engine.stats().steps == before; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        EXPECT_EQ(engine.stats().steps - before, 1) << "round " << round;
    }
    stop = true;
    runner.join();
    ASSERT_EQ(r["choices"].size(), 16u);
    expect_scored(r["choices"][15], prompts[15].get<std::vector<int32_t>>());
}

TEST(EchoScoring, NChoicesPerPromptArePromptMajor) {
    const json r = run({{"model", "m"}, {"prompt", {{0, 5, 6}, {0, 9}}}, {"n", 2}, {"max_tokens", 3},
                        {"temperature", 1}, {"seed", 11}, {"echo", true}});
    ASSERT_EQ(r["choices"].size(), 4u);
    const std::string p0 = loaded().tok->decode({0, 5, 6}, true), p1 = loaded().tok->decode({0, 9}, true);
    for (size_t i = 0; i < 4; ++i) {
        EXPECT_EQ(r["choices"][i]["index"], i);
        const std::string text = r["choices"][i]["text"];
        EXPECT_EQ(text.rfind(i < 2 ? p0 : p1, 0), 0u) << i << ": " << text;
        EXPECT_TRUE(r["choices"][i]["logprobs"].is_null());
    }
    // choice i of a prompt draws with seed + i, as a request for that prompt alone does
    const json alone = run({{"model", "m"}, {"prompt", {0, 9}}, {"n", 2}, {"max_tokens", 3}, {"temperature", 1},
                            {"seed", 11}, {"echo", true}});
    EXPECT_EQ(alone["choices"][1]["text"], r["choices"][3]["text"]);
}

}  // namespace
