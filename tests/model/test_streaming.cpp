// Streaming experts from disk never changes a bit of the output: for every fixture, logits with experts read on
// demand (no cache, a small cache, a large cache; LRU and LFU; every read backend available) equal the resident
// run exactly. A failing drive fails the request with a clear error and the model keeps working afterwards.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/model.h"
#include "runtime/generate.h"

using namespace sluice;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> fixture_dirs() {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(std::string(SLUICE_TEST_DATA_DIR) + "/fixtures"))
        if (fs::exists(e.path() / "ref.json")) out.push_back(e.path().string());
    std::sort(out.begin(), out.end());
    return out;
}

std::vector<int32_t> prompt_of(const std::string& dir) {
    std::ifstream f(dir + "/ref.json");
    return nlohmann::json::parse(f)["ids"].get<std::vector<int32_t>>();
}

class StreamingTest : public ::testing::TestWithParam<std::string> {};

TEST_P(StreamingTest, BitIdenticalToResident) {
    const std::string dir = GetParam();
    const auto ids = prompt_of(dir);
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
        {1000, "lru", io::Backend::Auto}, {2, "lfu", io::Backend::Buffered},
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
        if (v.cache_experts == 0) EXPECT_EQ(st.experts_read, st.experts_requested);  // no slot to read ahead into
        // a second pass over the same prompt with a cache that holds every expert reads nothing new
        if (v.cache_experts == 1000) {
            const uint64_t before = st.experts_read;
            EXPECT_EQ(prompt_logits(*streamed, ids, 8), want);
            EXPECT_EQ(streamed->streaming()->stats().experts_read, before);
        }
    }
}

std::string fixture_name(const ::testing::TestParamInfo<std::string>& info) {
    return fs::path(info.param).filename().string();
}
INSTANTIATE_TEST_SUITE_P(Fixtures, StreamingTest, ::testing::ValuesIn(fixture_dirs()), fixture_name);

}  // namespace

TEST(Streaming, ReadErrorFailsTheRequestOnly) {
    const std::string dir = std::string(SLUICE_TEST_DATA_DIR) + "/fixtures/k2_noqlora";
    const auto ids = prompt_of(dir);
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
    const auto ids = prompt_of(dir);
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
