// The state store (state/sequence_state, state/state_file) on every fixture: fork, snapshot + truncate (KDA through
// its journal replay), truncate(0) and save/load each give logits bit-identical to an uninterrupted run; the
// recurrent limits and every bad state file are one clear error.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "../support/fixtures.h"
#include "../support/scratch_dir.h"
#include "core/error.h"
#include "models/model.h"
#include "ops/exec_context.h"
#include "state/state_file.h"

using namespace sluice;
using namespace sluice::test;
namespace fs = std::filesystem;

namespace {

// Runs ids through seq in one forward pass (positions continue the state); every row's logits.
std::vector<float> run(Model& m, SequenceState& seq, std::span<const int32_t> ids) {
    Batch b;
    for (size_t i = 0; i < ids.size(); ++i) b.add(ids[i], seq.n_past() + int64_t(i), 0, true);
    SequenceState* seqs[] = {&seq};
    std::vector<float> logits;
    m.forward(*make_exec_context(m), b, seqs, logits);
    return logits;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::string scratch(const std::string& name) {
    static const fs::path dir = sluice::test::scratch_dir("state");  // removed when the process exits
    return (dir / name).string();
}

class StateTest : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        model = load_model(GetParam());
        ids = fixture_prompt(GetParam());
        ASSERT_GE(ids.size(), 6u);
        k = int64_t(ids.size()) / 2;
        auto seq = model->new_sequence();
        run(*model, *seq, head());
        ref_tail = run(*model, *seq, tail());  // the uninterrupted run's logits for the tail rows
    }
    std::span<const int32_t> head() const { return std::span(ids).first(size_t(k)); }
    std::span<const int32_t> tail() const { return std::span(ids).subspan(size_t(k)); }
    std::vector<int32_t> garbage(size_t n) const {
        std::vector<int32_t> g;
        for (size_t i = 0; i < n; ++i) g.push_back(int32_t((ids[i] * 7 + 3 + int32_t(i)) % model->info().vocab_size));
        return g;
    }
    std::unique_ptr<Model> model;
    std::vector<int32_t> ids;
    int64_t k = 0;
    std::vector<float> ref_tail;
};

TEST_P(StateTest, ForkIsIndependent) {
    auto a = model->new_sequence();
    run(*model, *a, head());
    auto b = a->fork();
    EXPECT_EQ(b->n_past(), k);
    run(*model, *b, garbage(5));  // the fork diverges; the original must not see it
    EXPECT_TRUE(same_bits(run(*model, *a, tail()), ref_tail));
    auto c = model->new_sequence();
    run(*model, *c, head());
    auto d = c->fork();
    EXPECT_TRUE(same_bits(run(*model, *d, tail()), ref_tail));
}

TEST_P(StateTest, SnapshotTruncateReplay) {
    // after the snapshot at k: the first j tail tokens, then wrong ones; truncate back to k + j and go on
    for (int64_t j : {int64_t(0), int64_t(1), int64_t(tail().size()) - 1}) {
        auto seq = model->new_sequence();
        run(*model, *seq, head());
        seq->snapshot();
        EXPECT_EQ(seq->rollback_floor(), model->new_sequence()->layout().has_recurrent() ? k : 0);
        std::vector<int32_t> rows(tail().begin(), tail().begin() + j);
        const auto g = garbage(4);
        rows.insert(rows.end(), g.begin(), g.end());
        // in two passes, so the journal spans passes
        run(*model, *seq, std::span(rows).first(rows.size() / 2));
        run(*model, *seq, std::span(rows).subspan(rows.size() / 2));
        seq->truncate(k + j);
        EXPECT_EQ(seq->n_past(), k + j);
        EXPECT_TRUE(std::equal(seq->tokens().begin(), seq->tokens().end(), ids.begin()));
        const auto rest = run(*model, *seq, tail().subspan(size_t(j)));
        const std::vector<float> want(ref_tail.begin() + j * model->info().vocab_size, ref_tail.end());
        EXPECT_TRUE(same_bits(rest, want)) << "j = " << j;
    }
}

TEST_P(StateTest, TruncateToZeroAndRecurrentLimits) {
    auto seq = model->new_sequence();
    run(*model, *seq, garbage(5));
    seq->truncate(0);
    EXPECT_EQ(seq->n_past(), 0);
    run(*model, *seq, head());
    EXPECT_TRUE(same_bits(run(*model, *seq, tail()), ref_tail));
    if (seq->layout().has_recurrent()) {
        EXPECT_EQ(seq->rollback_floor(), seq->n_past());
        try {
            seq->truncate(1);
            FAIL() << "a recurrent state without a snapshot cannot go back to 1";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("snapshot"), std::string::npos) << e.what();
        }
        seq->snapshot();
        run(*model, *seq, garbage(2));
        EXPECT_THROW(seq->truncate(seq->snapshot_position() - 1), Error);
    } else {
        seq->truncate(1);  // per-token caches go anywhere
        EXPECT_EQ(seq->n_past(), 1);
    }
}

TEST_P(StateTest, SaveLoadRoundTrip) {
    const auto fm = model->info().state_file_model();
    for (bool with_snapshot : {false, true}) {
        auto seq = model->new_sequence();
        run(*model, *seq, head());
        if (with_snapshot) {
            seq->snapshot();
            run(*model, *seq, garbage(3));
        }
        const std::string path = scratch(fixture_name({GetParam(), 0}) + ".state");
        save_state(*seq, fm, path);
        EXPECT_EQ(std::filesystem::file_size(path), state_file_bytes(*seq, fm));  // the SSD tier budgets with it
        auto loaded = model->new_sequence();
        load_state(path, fm, *loaded);
        EXPECT_EQ(loaded->n_past(), seq->n_past());
        EXPECT_TRUE(std::equal(loaded->tokens().begin(), loaded->tokens().end(), seq->tokens().begin()));
        if (with_snapshot) loaded->truncate(k);  // the journal came along
        EXPECT_TRUE(same_bits(run(*model, *loaded, tail()), ref_tail)) << "snapshot " << with_snapshot;
        fs::remove(path);
    }
}

// A state longer than one page of rows (the loader copies a page of rows at a time): every row of every layer,
// the KDA state, snapshot and journal come back bit for bit, and the next token's logits equal the original's.
TEST_P(StateTest, SaveLoadAcrossPages) {
    const auto fm = model->info().state_file_model();
    const int64_t n = PagedRows::k_page_rows + 36, snap = n - 5;  // a full page and a partial one; within 128 positions
    std::vector<int32_t> long_ids;
    for (int64_t i = 0; i < n + 1; ++i)
        long_ids.push_back(int32_t((ids[size_t(i) % ids.size()] * 5 + 7 * i + 1) % model->info().vocab_size));
    auto seq = model->new_sequence();
    run(*model, *seq, std::span(long_ids).first(size_t(snap)));
    seq->snapshot();
    run(*model, *seq, std::span(long_ids).subspan(size_t(snap), size_t(n - snap)));
    const std::string path = scratch(fixture_name({GetParam(), 0}) + ".pages.state");
    save_state(*seq, fm, path);
    auto loaded = model->new_sequence();
    load_state(path, fm, *loaded);
    fs::remove(path);
    ASSERT_EQ(loaded->n_past(), n);
    EXPECT_EQ(loaded->snapshot_position(), seq->snapshot_position());
    const auto same_rows = [&](const PagedRows& a, const PagedRows& b) {
        if (a.rows() != b.rows() || a.width() != b.width()) return false;
        for (int64_t t = 0; t < a.rows(); ++t)
            if (std::memcmp(a.row(t), b.row(t), size_t(a.width()) * sizeof(float)) != 0) return false;
        return true;
    };
    const auto& layers = seq->layout().layers;
    for (size_t l = 0; l < layers.size(); ++l) {
        const auto i = int64_t(l);
        switch (layers[l].kind) {
            case StateLayout::Kind::latent:
                EXPECT_TRUE(same_rows(loaded->latent(i).data, seq->latent(i).data)) << "layer " << l;
                break;
            case StateLayout::Kind::kv:
                EXPECT_TRUE(same_rows(loaded->kv(i).k, seq->kv(i).k)) << "layer " << l;
                EXPECT_TRUE(same_rows(loaded->kv(i).v, seq->kv(i).v)) << "layer " << l;
                break;
            case StateLayout::Kind::kda: {
                const KdaState &a = loaded->kda(i), &b = seq->kda(i);
                EXPECT_TRUE(a.conv == b.conv && a.state == b.state && a.snap_conv == b.snap_conv &&
                            a.snap_state == b.snap_state && a.journal == b.journal)
                    << "layer " << l;
                break;
            }
            case StateLayout::Kind::none:
                break;
        }
    }
    const auto next = std::span(long_ids).subspan(size_t(n), 1);
    EXPECT_TRUE(same_bits(run(*model, *loaded, next), run(*model, *seq, next)));
}

// Pages: copies share them until one side writes (copy-on-write); truncate drops whole pages past the end.
TEST(PagedRows, CopyOnWriteAndTruncate) {
    const int64_t W = 3, P = PagedRows::k_page_rows;
    PagedRows a;
    a.init(W);
    for (int64_t t = 0; t < P + 5; ++t)
        for (int64_t j = 0; j < W; ++j) a.write_row(t)[j] = float(t * 10 + j);
    EXPECT_EQ(a.rows(), P + 5);
    EXPECT_EQ(a.size_bytes(), uint64_t(2 * P * W) * sizeof(float));
    PagedRows b = a;  // shares both pages
    EXPECT_EQ(b.row(P + 1), a.row(P + 1));
    b.truncate(P + 2);
    b.write_row(P + 2)[0] = -1.0f;  // b's second page is copied first
    EXPECT_NE(b.row(P + 1), a.row(P + 1));
    EXPECT_EQ(a.row(P + 2)[0], float((P + 2) * 10));
    EXPECT_EQ(b.row(P + 2)[0], -1.0f);
    EXPECT_EQ(b.row(3), a.row(3)) << "the untouched first page stays shared";
    EXPECT_EQ(b.view().row(P + 1)[1], float((P + 1) * 10 + 1));
    a.truncate(P);
    EXPECT_EQ(a.rows(), P);
    EXPECT_EQ(a.size_bytes(), uint64_t(P * W) * sizeof(float));
    a.truncate(0);
    EXPECT_EQ(a.size_bytes(), 0u);
    // write_rows: rows of one page at once (how a state file is loaded)
    PagedRows c;
    c.init(W);
    float* first = c.write_rows(0, P);
    EXPECT_EQ(c.rows(), P);
    EXPECT_EQ(first + (P - 1) * W, c.row(P - 1));
    float* second = c.write_rows(P, 2);
    EXPECT_EQ(second, c.row(P));
    EXPECT_EQ(c.rows(), P + 2);
    EXPECT_EQ(c.size_bytes(), uint64_t(2 * P * W) * sizeof(float));
}

// The pool: a page freed by its last holder is handed out again; a bounded pool refuses one page more with one Error
// (also for the copy a write into a shared page needs), leaving the caches as they were.
TEST(PagePool, ReusesPagesAndRefusesPastItsBound) {
    const int64_t W = 3, P = PagedRows::k_page_rows;
    auto pool = std::make_shared<PagePool>(P * W, 2, 3, "test caches");
    PagedRows a;
    a.init(W, pool);
    for (int64_t t = 0; t < 3 * P; ++t) a.write_row(t)[0] = float(t);
    EXPECT_EQ(pool->pages_in_use(), 3);
    EXPECT_EQ(pool->pages_allocated(), 3);  // a slab of two, then the one left to the bound
    try {
        a.write_row(3 * P);
        ADD_FAILURE() << "a fourth page from a pool of three";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("memory plan"), std::string::npos) << e.what();
    }
    EXPECT_EQ(a.rows(), 3 * P);
    PagedRows b = a;  // shares all three
    EXPECT_EQ(pool->pages_in_use(), 3);
    EXPECT_THROW(b.write_row(3 * P - 1), Error);  // copy-on-write needs a page
    EXPECT_EQ(b.row(3 * P - 1), a.row(3 * P - 1));
    a.truncate(P);  // b still holds the last two
    EXPECT_EQ(pool->pages_in_use(), 3);
    const float* last = b.row(2 * P);
    b.truncate(2 * P);  // its last holder: back to the pool
    EXPECT_EQ(pool->pages_in_use(), 2);
    b.write_row(2 * P)[0] = 7.0f;
    EXPECT_EQ(b.row(2 * P), last) << "the freed page is handed out again";
    a = PagedRows();
    b = PagedRows();
    EXPECT_EQ(pool->pages_in_use(), 0);
}

// A model's pools hold what the plan reserves for the per-token caches (StateLayout::reserve_bytes), and the prefix
// cache's bytes as pages on top.
TEST(PagePool, PlannedPagesAreTheReservation) {
    StateLayout L;
    L.add_latent(8);
    L.add_kv(4);
    L.add_kda(2, 4, 4);
    L.add_latent(8);
    const int64_t P = PagedRows::k_page_rows;
    const StatePagePlan plan{10 * P, 3, 0, true};
    const int64_t latent = StatePages::planned_pages(L, plan, 8), kv = StatePages::planned_pages(L, plan, 4);
    EXPECT_EQ(latent, 2 * (10 + 3));
    EXPECT_EQ(kv, 2 * (10 + 3));
    EXPECT_EQ(StatePages::planned_pages(L, plan, 5), 0);
    EXPECT_EQ(uint64_t(latent * P * 8 + kv * P * 4) * sizeof(float),
              L.reserve_bytes(plan.max_context_tokens, plan.max_sequences) - L.recurrent_bytes() * 3);
    const StatePagePlan cached{10 * P, 3, 2 * P * L.bytes_per_token(), true};
    EXPECT_EQ(StatePages::planned_pages(L, cached, 8), 2 * (10 + 3 + 2));
    StatePages pages(L, plan);
    EXPECT_EQ(pages.pool(8)->max_pages(), latent);
    EXPECT_EQ(pages.pool(4)->max_pages(), kv);
    EXPECT_EQ(pages.pool(6)->max_pages(), 0) << "a width outside the plan (the taps) is not bounded";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, StateTest, ::testing::ValuesIn(fixture_dirs()), fixture_name);

// Bad state files: each refused with the file named, the target left empty.
class StateFileErrors : public ::testing::Test {
protected:
    void SetUp() override {
        dir = std::string(SLUICE_TEST_DATA_DIR) + "/fixtures/kimi_linear_noqlora";
        model = load_model(dir);
        auto seq = model->new_sequence();
        run(*model, *seq, fixture_prompt(dir));
        seq->snapshot();
        path = scratch("good.state");
        save_state(*seq, model->info().state_file_model(), path);
        std::ifstream f(path, std::ios::binary);
        good.assign(std::istreambuf_iterator<char>(f), {});
    }
    void TearDown() override {
        fs::remove(path);
        fs::remove(scratch("bad.state"));
    }
    std::string load_error(const std::string& bytes, StateFileModel fm) {
        const std::string p = scratch("bad.state");
        std::ofstream(p, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
        auto seq = model->new_sequence();
        try {
            load_state(p, fm, *seq);
        } catch (const Error& e) {
            EXPECT_EQ(seq->n_past(), 0);
            const std::string msg = e.what();
            EXPECT_NE(msg.find(p), std::string::npos) << msg;
            return msg;
        }
        ADD_FAILURE() << "loaded a bad state file";
        return {};
    }
    std::string load_error(const std::string& bytes) { return load_error(bytes, model->info().state_file_model()); }
    std::string dir, path, good;
    std::unique_ptr<Model> model;
};

TEST_F(StateFileErrors, EachOneClearError) {
    EXPECT_NE(load_error("not a state file at all").find("not a sluice state file"), std::string::npos);
    std::string v = good;
    v[8] = 2;  // version 2
    EXPECT_NE(load_error(v).find("state file version 2"), std::string::npos);
    for (size_t cut : {good.size() - 1, good.size() / 2})
        EXPECT_NE(load_error(good.substr(0, cut)).find("checksum mismatch"), std::string::npos) << cut;
    EXPECT_NE(load_error(good.substr(0, 20)).find("truncated"), std::string::npos);
    std::string flipped = good;
    flipped[good.size() / 2] ^= 0x40;
    EXPECT_NE(load_error(flipped).find("checksum mismatch"), std::string::npos);
    StateFileModel other = model->info().state_file_model();
    other.config_xxh3 ^= 1;
    EXPECT_NE(load_error(good, other).find("another model (its config.json differs)"), std::string::npos);
    other = model->info().state_file_model();
    other.architecture = "DeepseekV3ForCausalLM";
    EXPECT_NE(load_error(good, other).find("from a KimiLinearForCausalLM model"), std::string::npos);
    // another model's state into this one: the fingerprint differs
    auto ds = load_model(std::string(SLUICE_TEST_DATA_DIR) + "/fixtures/k2_noqlora");
    auto seq = ds->new_sequence();
    run(*ds, *seq, std::vector<int32_t>{1, 2, 3});
    const std::string p = scratch("k2.state");
    save_state(*seq, ds->info().state_file_model(), p);
    auto target = model->new_sequence();
    EXPECT_THROW(load_state(p, model->info().state_file_model(), *target), Error);
    EXPECT_THROW(load_state(scratch("missing.state"), model->info().state_file_model(), *target), Error);
}

}  // namespace
