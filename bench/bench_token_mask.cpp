// Structured-output mask cost per generated token on real 150k-200k vocabularies (tests/data/tokenizers: Qwen3
// 151,643 tokens, DeepSeek-V3 128k, gpt-oss 200k), in the states a JSON output passes through, next to two parts of
// every decode step of such a model that the mask must stay small against: the sampler over the same vocabulary
// (temperature 1, which sorts it) and the LM head alone (BF16 [151936 x 2048], Qwen3-30B-A3B's, on
// SLUICE_BENCH_THREADS threads, default 2) -- a lower bound of a decode step, which also runs every layer.
// The trie is built once per tokenizer (BM_TrieBuild). Run: cmake --preset bench && cmake --build --preset bench
// --target bench_token_mask && build/bench/bin/bench_token_mask
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "core/thread_pool.h"
#include "ops/ops.h"
#include "runtime/sampler.h"
#include "runtime/token_mask.h"
#include "tokenizer/tokenizer.h"
#include "../tests/support/test_tokenizers.h"

namespace sluice {
namespace {

struct Vocab {
    std::unique_ptr<tok::Tokenizer> tok;
    std::shared_ptr<const TokenTrie> trie;
};

const Vocab& vocab(const std::string& name) {
    static std::map<std::string, Vocab> cache;
    auto it = cache.find(name);
    if (it != cache.end()) return it->second;
    Vocab v;
    v.tok = test::open_tokenizer(name);
    v.trie = TokenTrie::from_tokenizer(*v.tok, v.tok->vocab_size());
    return cache.emplace(name, std::move(v)).first->second;
}

const char* k_schema = R"({"type":"object","additionalProperties":false,"required":["title","year","tags","rating"],
  "properties":{"title":{"type":"string"},"year":{"type":"integer"},"rating":{"type":"number"},
  "tags":{"type":"array","items":{"type":"string"}},"kind":{"enum":["book","film","album"]}}})";

// Where the output stands when the mask is computed: the prefix fed before it.
const std::map<std::string, std::string> k_states = {
    {"start", ""},
    {"key", R"({"ti)"},
    {"string", R"({"title": "The Name of the Ro)"},
    {"number", R"({"title": "x", "year": 19)"},
    {"after_value", R"({"title": "x", "year": 1980)"},
    {"array_string", R"({"title": "x", "year": 1980, "tags": ["histor)"},
    {"any_object_string", R"({"a": [{"b": "some text)"},
};

void BM_Mask(benchmark::State& state, const std::string& tok_name, const std::string& where) {
    const Vocab& v = vocab(tok_name);
    const bool any = where.rfind("any_", 0) == 0;
    auto a = std::make_shared<const schema::Automaton>(
        any ? schema::any_object_grammar() : schema::compile_schema(nlohmann::ordered_json::parse(k_schema)));
    JsonConstraint c(a, v.trie);
    if (!c.feed(k_states.at(where))) state.SkipWithError("prefix refused");
    const std::vector<int32_t> eos{*v.tok->eos_id()};
    std::vector<float> logits(size_t(v.trie->vocab_size()), 0.5f);
    size_t allowed = 0;
    for (auto _ : state) {
        std::fill(logits.begin(), logits.end(), 0.5f);
        benchmark::DoNotOptimize(c.mask(logits, eos));
        benchmark::ClobberMemory();
    }
    for (float x : logits) allowed += x == 0.5f;
    state.counters["vocab"] = double(v.trie->vocab_size());
    state.counters["allowed"] = double(allowed);
}

void BM_TrieBuild(benchmark::State& state, const std::string& tok_name) {
    const Vocab& v = vocab(tok_name);
    for (auto _ : state) benchmark::DoNotOptimize(TokenTrie::from_tokenizer(*v.tok, v.tok->vocab_size()));
}

// The sampler's own cost per token at temperature 1 over 151,936 logits (the engine pays it unconstrained too).
void BM_Sampler(benchmark::State& state) {
    std::vector<float> logits(151936);
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0, 3);
    for (auto& x : logits) x = nd(rng);
    Sampler s(SamplingParams{.temperature = 1.0f, .top_p = 0.95f, .seed = 1});
    for (auto _ : state) benchmark::DoNotOptimize(s.sample(logits));
}

// The LM head alone: one row through BF16 [151936 x 2048].
void BM_LmHead(benchmark::State& state) {
    constexpr int64_t rows = 151936, cols = 2048;
    static std::vector<uint8_t> data(size_t(rows * cols * 2), 0);
    Weight w;
    w.format = WeightFormat::BF16;
    w.rows = rows;
    w.cols = cols;
    w.data = data.data();
    const char* t = std::getenv("SLUICE_BENCH_THREADS");
    ThreadPool pool(t && *t ? std::atoi(t) : 2);
    std::vector<float> x(cols, 0.01f), y(rows);
    for (auto _ : state) {
        ops::cpu::matmul(w, x.data(), 1, y.data(), pool);
        benchmark::ClobberMemory();
    }
}

const int reg = [] {
    for (const char* t : {"qwen3", "deepseek_v3", "gptoss"}) {
        benchmark::RegisterBenchmark((std::string("BM_TrieBuild/") + t).c_str(), BM_TrieBuild, t)
            ->Unit(benchmark::kMillisecond)->Iterations(3);
        for (const auto& [where, prefix] : k_states)
            benchmark::RegisterBenchmark((std::string("BM_Mask/") + t + "/" + where).c_str(), BM_Mask, t, where)
                ->Unit(benchmark::kMicrosecond);
    }
    benchmark::RegisterBenchmark("BM_Sampler/151936", BM_Sampler)->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark("BM_LmHead/bf16_151936x2048", BM_LmHead)->Unit(benchmark::kMicrosecond);
    return 0;
}();

}  // namespace
}  // namespace sluice

BENCHMARK_MAIN();
