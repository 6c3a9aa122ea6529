// Streaming experts from disk never changes a bit of the output: for every fixture, logits with experts read on
// demand (no cache, a small cache, a large cache; LRU and LFU; every read backend available) equal the resident
// run exactly. A failing drive fails the request with a clear error and the model keeps working afterwards.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../support/fixtures.h"
#include "core/error.h"
#include "models/model.h"
#include "runtime/generate.h"

using namespace sluice;
using namespace sluice::test;
namespace fs = std::filesystem;

namespace {

class StreamingTest : public ::testing::TestWithParam<std::string> {};

TEST_P(StreamingTest, BitIdenticalToResident) {
    const std::string dir = GetParam();
    const auto ids = fixture_prompt(dir);
    auto resident = load_model(dir, {.n_threads = 2});
    const auto want = prompt_logits(*resident, ids, 8);
    const uint64_t expert = resident->info().expert_bytes;
    if (expert == 0) GTEST_SKIP() << "no routed experts";
    struct Variant {
        uint64_t cache_experts;
        std::string policy;
        io::Backend backend;
    } variants[] = {
        {0, "lru", io::Backend::Auto},    {3, "lru", io::Backend::Auto},   {3, "lfu", io::Backend::Pread},
        {1000, "lru", io::Backend::Auto}, {2, "lfu", io::Backend::Buffered}, {3, "markov", io::Backend::Auto},
    };
    for (const auto& v : variants) {
        LoadOptions opt{.n_threads = 2, .stream_experts = true};
        opt.streaming.cache_bytes = v.cache_experts * (expert + 6 * 8192);
        opt.streaming.policy = v.policy;
        opt.streaming.reader.backend = v.backend;
        opt.streaming.staging_experts = 2;
        auto streamed = load_model(dir, opt);
        ASSERT_NE(streamed->streaming(), nullptr);
        EXPECT_EQ(prompt_logits(*streamed, ids, 8), want)
            << "cache " << v.cache_experts << " experts, " << v.policy << ", " << io::backend_name(v.backend);
        const auto& st = streamed->streaming()->stats();
        EXPECT_GT(st.experts_read, 0u);
        // reads on demand never exceed uses; read-aheads (prefetch hints) come on top
        EXPECT_LE(st.experts_read - st.prefetch_issued, st.experts_requested);
        if (v.cache_experts == 0) {
            EXPECT_EQ(st.experts_read, st.experts_requested);  // no slot to read ahead into
        }
        // a second pass over the same prompt with a cache that holds every expert reads nothing new
        if (v.cache_experts == 1000) {
            const uint64_t before = st.experts_read;
            EXPECT_EQ(prompt_logits(*streamed, ids, 8), want);
            EXPECT_EQ(streamed->streaming()->stats().experts_read, before);
        }
    }
}

// The budget that keeps layers [0, k) resident and streams the rest, per the plan's own cost model.
uint64_t budget_streaming_from(const ResidencyPlan& p, size_t k) {
    uint64_t cost = p.spine_fixed_bytes + p.state_bytes + p.staging_bytes, tail = 0;
    for (size_t l = 0; l < p.layer_bytes.size(); ++l) {
        if (l < k) cost += p.layer_bytes[l];
        else tail = std::max(tail, p.layer_bytes[l]);
    }
    return cost + 2 * tail;
}

// Budgets below the spine: the matrices of the last layers are read layer by layer into two slots, and the
// logits are still the resident run's, bit for bit, over several passes (prefill chunks, then decode rows).
TEST_P(StreamingTest, SpineStreamedBitIdentical) {
    const std::string dir = GetParam();
    const auto ids = fixture_prompt(dir);
    auto resident = load_model(dir, {.n_threads = 2});
    const auto want = prompt_logits(*resident, ids, 8);
    const auto want_rows = prompt_logits(*resident, ids, 1);
    auto full = load_model(dir, {.n_threads = 2, .memory_budget_bytes = uint64_t(1) << 40});
    ASSERT_NE(full->residency(), nullptr);
    EXPECT_FALSE(full->residency()->streams_spine());
    EXPECT_EQ(full->spine_streamer(), nullptr);
    const ResidencyPlan plan = *full->residency();
    const size_t L = plan.layer_bytes.size();
    ASSERT_GE(L, 3u);
    for (size_t k : {size_t(0), size_t(1), L - 3}) {
        // small fixtures rarely save memory by streaming (two slots of the largest layer), so force the split
        const uint64_t budget = budget_streaming_from(plan, k);
        auto model = load_model(dir, {.n_threads = 2, .memory_budget_bytes = budget, .spine_stream_from = int64_t(k)});
        const ResidencyPlan* p = model->residency();
        ASSERT_NE(p, nullptr);
        ASSERT_TRUE(p->streams_spine()) << p->describe();
        EXPECT_EQ(p->first_streamed_layer, int64_t(k));
        EXPECT_LE(p->min_bytes() + p->expert_cache_bytes, budget);
        ASSERT_NE(model->spine_streamer(), nullptr);
        EXPECT_EQ(prompt_logits(*model, ids, 8), want) << "streaming from layer " << p->first_streamed_layer;
        EXPECT_EQ(prompt_logits(*model, ids, 1), want_rows) << "streaming from layer " << p->first_streamed_layer;
        const auto& st = model->spine_streamer()->stats();
        const uint64_t passes = (ids.size() + 7) / 8 + ids.size();
        const uint64_t streamed = L - uint64_t(p->first_streamed_layer);
        // streamed layers alternate between two slots; a slot that only one layer uses keeps it, the others are
        // read again on every pass
        const uint64_t in_slot0 = (streamed + 1) / 2, in_slot1 = streamed / 2;
        const uint64_t per_pass = (in_slot0 > 1 ? in_slot0 : 0) + (in_slot1 > 1 ? in_slot1 : 0);
        EXPECT_GE(st.layers_read, passes * per_pass);
        EXPECT_LE(st.layers_read, passes * streamed + 2);
        EXPECT_GT(st.bytes_read, 0u);
    }
    // a budget below what streaming every layer needs (and below the whole spine): refused, naming the minimum
    const uint64_t whole = plan.min_bytes();
    try {
        load_model(dir, {.n_threads = 2, .memory_budget_bytes = std::min(whole, budget_streaming_from(plan, 0)) - 1});
        FAIL() << "expected the budget to be refused";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("minimum working set"), std::string::npos) << e.what();
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, StreamingTest, ::testing::ValuesIn(fixture_dirs()), fixture_name);

}  // namespace

TEST(Streaming, ReadErrorFailsTheRequestOnly) {
    const std::string dir = std::string(SLUICE_TEST_DATA_DIR) + "/fixtures/k2_noqlora";
    const auto ids = fixture_prompt(dir);
    LoadOptions opt{.n_threads = 2, .stream_experts = true};
    opt.streaming.cache_bytes = 4 << 20;
    opt.streaming.prefetch = false;  // the fault must hit a read the request itself waits for
    auto model = load_model(dir, opt);
    auto resident = load_model(dir);
    const auto want = prompt_logits(*resident, ids, 64);
    const_cast<io::DirectReader&>(model->streaming()->reader()).set_fault_plan({io::FaultKind::Eio, 3});
    try {
        prompt_logits(*model, ids, 64);
        FAIL() << "expected a read error";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
        EXPECT_NE(msg.find("expert"), std::string::npos) << msg;
    }
    // the failed expert was not cached with garbage: the next request is exact
    EXPECT_EQ(prompt_logits(*model, ids, 64), want);
}

// A read-ahead that fails is forgotten and read again on demand: the result is still exact.
TEST(Streaming, FailedReadAheadIsRetried) {
    const std::string dir = std::string(SLUICE_TEST_DATA_DIR) + "/fixtures/k2_noqlora";
    const auto ids = fixture_prompt(dir);
    auto resident = load_model(dir);
    const auto want = prompt_logits(*resident, ids, 1);
    for (uint64_t nth : {1, 2, 5, 9}) {
        LoadOptions opt{.n_threads = 2, .stream_experts = true};
        opt.streaming.cache_bytes = 4 << 20;
        auto model = load_model(dir, opt);
        // decode-style (one row per pass) so prefetch hints are issued between layers
        const_cast<io::DirectReader&>(model->streaming()->reader()).set_fault_plan({io::FaultKind::Eio, nth});
        try {
            auto got = prompt_logits(*model, ids, 1);
            EXPECT_EQ(got, want) << "fault at read " << nth;
        } catch (const Error& e) {
            // the fault hit a demand read: a clean error is the right outcome too
            EXPECT_NE(std::string(e.what()).find("expert"), std::string::npos) << e.what();
        }
        EXPECT_EQ(prompt_logits(*model, ids, 1), want);
        EXPECT_GT(model->streaming()->stats().prefetch_issued, 0u);
    }
}

// A spine read that fails fails that forward pass with an error naming the layer and the file; the next pass
// reads the layer again and is exact.
TEST(Streaming, SpineReadErrorFailsThePassOnly) {
    const std::string dir = std::string(SLUICE_TEST_DATA_DIR) + "/fixtures/kimi_k3_attnres_mxfp4";
    const auto ids = fixture_prompt(dir);
    auto resident = load_model(dir, {.n_threads = 2});
    const auto want = prompt_logits(*resident, ids, 4);
    auto full = load_model(dir, {.n_threads = 2, .memory_budget_bytes = uint64_t(1) << 40});
    const ResidencyPlan plan = *full->residency();
    for (uint64_t nth : {1, 2, 7}) {
        auto model = load_model(dir, {.n_threads = 2, .memory_budget_bytes = budget_streaming_from(plan, 0),
                                      .spine_stream_from = 0});
        ASSERT_NE(model->spine_streamer(), nullptr);
        model->spine_streamer()->reader().set_fault_plan({io::FaultKind::Eio, nth});
        try {
            prompt_logits(*model, ids, 4);
            FAIL() << "expected a read error (fault at read " << nth << ")";
        } catch (const Error& e) {
            const std::string msg = e.what();
            EXPECT_NE(msg.find("spine of layer"), std::string::npos) << msg;
            EXPECT_NE(msg.find(".safetensors"), std::string::npos) << msg;
        }
        EXPECT_EQ(prompt_logits(*model, ids, 4), want) << "fault at read " << nth;
    }
}
