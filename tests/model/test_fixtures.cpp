// Every fixture under tests/data/fixtures (made by tools/reference/ with Hugging Face transformers, float32) must
// be reproduced: logits within 1e-4 relative error, greedy ids identical. Prefill chunking and batching several
// sequences must not change a single bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/npy.h"
#include "models/model.h"
#include "ops/exec_context.h"
#include "runtime/generate.h"
#include "../support/fixtures.h"
#include "../support/device_env.h"
#include "../support/test_util.h"

using namespace sluice;
namespace fs = std::filesystem;

namespace {

using sluice::test::fixture_dirs;
using sluice::test::fixture_name;

struct Fixture {
    std::string dir;
    std::vector<int32_t> ids, greedy, ids_b, greedy_b;
    std::vector<float> ref, ref_b;
};

Fixture load_fixture(const std::string& dir) {
    Fixture f;
    f.dir = dir;
    std::ifstream in(dir + "/ref.json");
    auto j = nlohmann::json::parse(in);
    f.ids = j["ids"].get<std::vector<int32_t>>();
    f.greedy = j["greedy"].get<std::vector<int32_t>>();
    f.ids_b = j["ids_b"].get<std::vector<int32_t>>();
    f.greedy_b = j["greedy_b"].get<std::vector<int32_t>>();
    f.ref = npy_read(dir + "/ref_logits.npy").as_f32();
    f.ref_b = npy_read(dir + "/ref_logits_b.npy").as_f32();
    return f;
}

using test::rel_error;

class FixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureTest, LogitsMatchReference) {
    Fixture f = load_fixture(GetParam());
    auto model = load_model(f.dir, {.n_threads = 2});
    const int64_t V = model->info().vocab_size;
    auto logits = prompt_logits(*model, f.ids, 4096);
    ASSERT_EQ(logits.size(), f.ref.size());
    const double err = rel_error(logits, f.ref);
    std::printf("[ fixture  ] %s: relative error %.3g over [%zu, %lld]\n", fs::path(f.dir).filename().c_str(), err,
                f.ids.size(), (long long)V);
    EXPECT_LE(err, 1e-4);
    for (size_t i = 0; i < f.ids.size(); ++i) {
        auto row = [&](const std::vector<float>& v) {
            return int(std::max_element(v.begin() + int64_t(i) * V, v.begin() + int64_t(i + 1) * V) - v.begin() -
                       int64_t(i) * V);
        };
        EXPECT_EQ(row(logits), row(f.ref)) << "argmax differs at position " << i;
    }
    auto logits_b = prompt_logits(*model, f.ids_b, 4096);
    EXPECT_LE(rel_error(logits_b, f.ref_b), 1e-4);
}

TEST_P(FixtureTest, ChunkedPrefillIsBitIdentical) {
    Fixture f = load_fixture(GetParam());
    auto model = load_model(f.dir, {.n_threads = 2});
    auto whole = prompt_logits(*model, f.ids, 4096);
    for (int64_t chunk : {1, 5, 16}) EXPECT_EQ(prompt_logits(*model, f.ids, chunk), whole) << "chunk " << chunk;
}

TEST_P(FixtureTest, GreedyMatchesReference) {
    Fixture f = load_fixture(GetParam());
    auto model = load_model(f.dir, {.n_threads = 2});
    GenerateOptions opt;
    opt.max_new_tokens = int64_t(f.greedy.size());
    opt.stop_at_eos = false;
    EXPECT_EQ(generate(*model, f.ids, opt).ids, f.greedy);
    EXPECT_EQ(generate(*model, f.ids_b, opt).ids, f.greedy_b);
}

// Two sequences prefilled in one batch (rows interleaved), then decoded together: every row's logits are
// bit-identical to running each sequence alone, and both greedy continuations match the reference.
TEST_P(FixtureTest, BatchedSequencesAreBitIdentical) {
    Fixture f = load_fixture(GetParam());
    auto model = load_model(f.dir, {.n_threads = 2});
    const int64_t V = model->info().vocab_size;
    auto alone_a = prompt_logits(*model, f.ids, 4096);
    auto alone_b = prompt_logits(*model, f.ids_b, 4096);

    auto sa = model->new_sequence(), sb = model->new_sequence();
    auto ctx = make_exec_context(*model);
    SequenceState* seqs[] = {sa.get(), sb.get()};
    Batch batch;
    std::vector<std::pair<int, size_t>> order;  // (seq, position) of each logits row
    for (size_t i = 0; i < std::max(f.ids.size(), f.ids_b.size()); ++i) {
        if (i < f.ids_b.size()) {
            batch.add(f.ids_b[i], int64_t(i), 1, true);
            order.push_back({1, i});
        }
        if (i < f.ids.size()) {
            batch.add(f.ids[i], int64_t(i), 0, true);
            order.push_back({0, i});
        }
    }
    std::vector<float> logits;
    model->forward(*ctx, batch, seqs, logits);
    for (size_t r = 0; r < order.size(); ++r) {
        const auto& alone = order[r].first == 0 ? alone_a : alone_b;
        const float* want = alone.data() + order[r].second * size_t(V);
        ASSERT_TRUE(std::equal(want, want + V, logits.data() + r * size_t(V)))
            << "row " << r << " (seq " << order[r].first << ", pos " << order[r].second << ")";
    }
    // decode both together
    std::vector<int32_t> got_a, got_b;
    auto last_row = [&](int seq) {
        for (size_t r = order.size(); r-- > 0;)
            if (order[r].first == seq) return r;
        return size_t(0);
    };
    auto argmax_row = [&](size_t r) {
        const float* p = logits.data() + r * size_t(V);
        return int32_t(std::max_element(p, p + V) - p);
    };
    int32_t next_a = argmax_row(last_row(0)), next_b = argmax_row(last_row(1));
    for (size_t step = 0; step < f.greedy.size(); ++step) {
        got_a.push_back(next_a);
        got_b.push_back(next_b);
        Batch d;
        d.add(next_a, int64_t(f.ids.size() + step), 0, true);
        d.add(next_b, int64_t(f.ids_b.size() + step), 1, true);
        model->forward(*ctx, d, seqs, logits);
        next_a = argmax_row(0);
        next_b = argmax_row(1);
    }
    EXPECT_EQ(got_a, f.greedy);
    EXPECT_EQ(got_b, f.greedy_b);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureTest, ::testing::ValuesIn(fixture_dirs()), fixture_name);

}  // namespace
