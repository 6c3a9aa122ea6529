// The engine's prefix cache (runtime/prefix_cache) on every fixture: a second chat turn, a repeated prompt and a
// prompt that shares only a head with an earlier one each reuse what they can and still give exactly the tokens of
// running alone; Kimi's recurrent state reuses the prefixes its snapshot allows; a cache too small to hold a state
// reuses nothing and changes nothing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "../support/fixtures.h"
#include "../support/reference_decode.h"
#include "models/model.h"
#include "ops/exec_context.h"
#include "runtime/engine.h"
#include "runtime/prefix_cache.h"
#include "state/state_file.h"

using namespace sluice;
using namespace sluice::test;

namespace {

struct Outcome {
    std::vector<int32_t> ids;
    int64_t n_cached = -1;
};

Outcome run_one(Engine& e, std::vector<int32_t> prompt, int64_t max_new) {
    RequestParams p;
    p.prompt = std::move(prompt);
    p.max_new_tokens = max_new;
    p.stop_at_eos = false;
    Outcome r;
    e.submit(p, [&](const TokenEvent& ev) {
        if (ev.id >= 0) r.ids.push_back(ev.id);
        r.n_cached = ev.n_cached;
        return true;
    });
    e.run_until_idle();
    return r;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

class PrefixCacheTest : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        model = load_model(GetParam());
        ids = fixture_prompt(GetParam());
        recurrent = model->new_sequence()->layout().has_recurrent();
    }
    std::vector<int32_t> alone(const std::vector<int32_t>& prompt, int64_t max_new) {
        return test::reference_generate(*model, prompt, max_new, false).ids;
    }
    std::unique_ptr<Model> model;
    std::vector<int32_t> ids;
    bool recurrent = false;
};

TEST_P(PrefixCacheTest, ChatTurnsRepeatsAndSharedHeads) {
    Engine e(*model, {.max_batch_rows = 5, .max_sequences = 2, .max_context_tokens = 512,
                      .prefix_cache_bytes = uint64_t(256) << 20});
    const std::vector<int32_t> p1(ids.begin(), ids.begin() + 8);
    const Outcome a = run_one(e, p1, 4);
    EXPECT_EQ(a.ids, alone(p1, 4));
    EXPECT_EQ(a.n_cached, 0);

    // the next turn: the whole conversation so far, plus new tokens. The finished request's state holds the prompt
    // and all but its last generated token.
    const auto p2 = concat(concat(p1, a.ids), {ids[1], ids[2], ids[3]});
    const Outcome b = run_one(e, p2, 4);
    EXPECT_EQ(b.ids, alone(p2, 4));
    EXPECT_EQ(b.n_cached, int64_t(p1.size() + a.ids.size()) - 1);

    // the same prompt again: all but its last token (whose logits are needed) come from the cache
    const Outcome c = run_one(e, p2, 3);
    EXPECT_EQ(c.ids, alone(p2, 3));
    EXPECT_EQ(c.n_cached, int64_t(p2.size()) - 1);

    // a prompt that shares only a head: per-token caches are cut back to it; recurrent state cannot go back before
    // its snapshot (the start of the prompt's last prefill chunk), so it starts over
    const auto p3 = concat(std::vector<int32_t>(p2.begin(), p2.begin() + 6), {ids[4], ids[0]});
    const Outcome d = run_one(e, p3, 3);
    EXPECT_EQ(d.ids, alone(p3, 3));
    if (!recurrent) EXPECT_EQ(d.n_cached, 6);
    EXPECT_GT(e.stats().cached_prompt_tokens, 0);
    EXPECT_GT(e.stats().prefix_cache.hits, 1);
}

TEST_P(PrefixCacheTest, ConcurrentRequestsAndATinyCache) {
    // two requests at once, then the same pair again: each its plain tokens, the second pair reusing
    Engine e(*model, {.max_batch_rows = 7, .max_sequences = 4, .max_context_tokens = 512,
                      .prefix_cache_bytes = uint64_t(256) << 20});
    const std::vector<int32_t> pa(ids.begin(), ids.begin() + 10), pb(ids.begin() + 2, ids.begin() + 9);
    for (int round = 0; round < 2; ++round) {
        Outcome ra, rb;
        for (const auto& pair : {std::pair<const std::vector<int32_t>*, Outcome*>{&pa, &ra}, {&pb, &rb}}) {
            Outcome* out = pair.second;  // a plain variable: clang 14 cannot capture structured bindings
            RequestParams p;
            p.prompt = *pair.first;
            p.max_new_tokens = 5;
            p.stop_at_eos = false;
            e.submit(p, [out](const TokenEvent& ev) {
                if (ev.id >= 0) out->ids.push_back(ev.id);
                out->n_cached = ev.n_cached;
                return true;
            });
        }
        e.run_until_idle();
        EXPECT_EQ(ra.ids, alone(pa, 5)) << "round " << round;
        EXPECT_EQ(rb.ids, alone(pb, 5)) << "round " << round;
        if (round == 1) EXPECT_EQ(ra.n_cached, int64_t(pa.size()) - 1);
    }
    Engine tiny(*model, {.max_batch_rows = 5, .max_sequences = 1, .max_context_tokens = 512,
                         .prefix_cache_bytes = 1024});
    run_one(tiny, pa, 2);
    const Outcome again = run_one(tiny, pa, 2);
    EXPECT_EQ(again.ids, alone(pa, 2));
    EXPECT_EQ(again.n_cached, 0);
}

// A speculating request ends with rejected drafts in its last pass: what it leaves in the cache holds only the
// tokens it was fed, so the next turn still gets its plain tokens.
TEST_P(PrefixCacheTest, AfterSpeculation) {
    Engine e(*model, {.max_batch_rows = 16, .max_sequences = 1, .max_context_tokens = 512,
                      .prefix_cache_bytes = uint64_t(256) << 20});
    const std::vector<int32_t> p1(ids.begin(), ids.begin() + 7);
    const auto truth = alone(p1, 9);
    const int64_t V = model->info().vocab_size;
    RequestParams p;
    p.prompt = p1;
    p.max_new_tokens = 9;
    p.stop_at_eos = false;
    p.draft_tokens = 6;
    p.drafter = [&](std::span<const int32_t> context, int64_t max_tokens, const SequenceState*, const DraftPick*) {
        std::vector<int32_t> d;
        for (size_t j = context.size() - p1.size(); j < truth.size() && int64_t(d.size()) < max_tokens; ++j)
            d.push_back(j % 4 == 3 ? int32_t((truth[j] + 1) % V) : truth[j]);
        while (int64_t(d.size()) < max_tokens) d.push_back(int32_t(d.size()) % V);  // wrong tails
        return d;
    };
    std::vector<int32_t> got;
    e.submit(p, [&](const TokenEvent& ev) {
        if (ev.id >= 0) got.push_back(ev.id);
        return true;
    });
    e.run_until_idle();
    ASSERT_EQ(got, truth);
    EXPECT_GT(e.stats().drafted, e.stats().accepted);
    const auto p2 = concat(concat(p1, got), {ids[2], ids[5]});
    const Outcome b = run_one(e, p2, 4);
    EXPECT_EQ(b.ids, alone(p2, 4));
    EXPECT_GT(b.n_cached, 0);
}

// Requests that arrive together and share a long head (batch lines with the same instructions): the first prefills
// it, the others wait for that and reuse it, so the head is computed once; the tokens are those of running alone.
TEST_P(PrefixCacheTest, ASharedHeadIsPrefilledOnce) {
    const int64_t head = Engine::kMinSharedPrefillTokens + 4;
    std::vector<int32_t> shared;  // the fixture's prompt ids, over and over
    for (int64_t i = 0; i < head; ++i) shared.push_back(ids[size_t(i) % ids.size()]);
    std::vector<std::vector<int32_t>> prompts;
    // tails of 20 tokens: the first request's last chunk starts past the shared head
    for (int i = 0; i < 4; ++i) {
        std::vector<int32_t> tail{ids[size_t(i) % ids.size()]};
        for (size_t j = 1; j < 20; ++j) tail.push_back(ids[(j * 3 + 1) % ids.size()]);
        prompts.push_back(concat(shared, tail));
    }
    Engine e(*model, {.max_batch_rows = 16, .max_sequences = 4, .max_context_tokens = 512,
                      .prefix_cache_bytes = uint64_t(256) << 20});
    std::vector<Outcome> got(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
        RequestParams p;
        p.prompt = prompts[i];
        p.max_new_tokens = 3;
        p.stop_at_eos = false;
        e.submit(p, [&got, i](const TokenEvent& ev) {
            if (ev.id >= 0) got[i].ids.push_back(ev.id);
            got[i].n_cached = ev.n_cached;
            return true;
        });
    }
    e.run_until_idle();
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i].ids, alone(prompts[i], 3)) << i;
    EXPECT_EQ(got[0].n_cached, 0);
    // recurrent state too: the first request leaves its state where the prompts part (a cache point)
    for (size_t i = 1; i < prompts.size(); ++i) EXPECT_EQ(got[i].n_cached, head) << i;
    EXPECT_EQ(e.stats().prompt_tokens, head + 4 * 20);
}

// Recurrent (KDA) state cannot be cut back, so a Kimi model leaves in the cache the states its requests ask for
// (RequestParams::cache_points: where the chat template closed an assistant turn) and those at block boundaries; a
// later prompt that shares the history up to one reuses exactly that much. The first token's logits equal a plain
// forward pass over the whole prompt, bit for bit, and so do the tokens.
TEST_P(PrefixCacheTest, TurnBoundariesAndBlocks) {
    std::vector<int32_t> a;  // 51 tokens: a 21-token history, then the rest of the prompt
    for (size_t i = 0; i < 51; ++i) a.push_back(ids[(i * 5 + i / 7) % ids.size()]);
    const auto other = [&](size_t at) {  // a's first `at` tokens, then others
        std::vector<int32_t> b(a.begin(), a.begin() + std::ptrdiff_t(at));
        b.push_back(*std::find_if(ids.begin(), ids.end(), [&](int32_t t) { return t != a[at]; }));
        for (size_t j = 1; j < 6; ++j) b.push_back(ids[(j * 3) % ids.size()]);
        return b;
    };
    const auto first_logits = [&](const std::vector<int32_t>& prompt) {
        auto seq = model->new_sequence();
        SequenceState* seqs[] = {seq.get()};
        Batch b;
        for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], int64_t(i), 0, i + 1 == prompt.size());
        std::vector<float> logits;
        model->forward(*make_exec_context(*model), b, seqs, logits);
        return logits;
    };
    const auto run = [&](Engine& e, const std::vector<int32_t>& prompt, std::vector<int64_t> points, bool check) {
        RequestParams p;
        p.prompt = prompt;
        p.max_new_tokens = 3;
        p.stop_at_eos = false;
        p.cache_points = std::move(points);
        Outcome r;
        std::vector<float> logits;
        e.submit(p, [&](const TokenEvent& ev) {
            if (ev.id >= 0) r.ids.push_back(ev.id);
            if (ev.id >= 0 && logits.empty()) logits.assign(ev.logits.begin(), ev.logits.end());
            r.n_cached = ev.n_cached;
            return true;
        });
        e.run_until_idle();
        if (check) {
            EXPECT_EQ(r.ids, alone(prompt, 3));
            EXPECT_TRUE(logits == first_logits(prompt)) << "first-token logits differ";
        }
        return r;
    };
    for (int64_t rows : {5, 64}) {
        SCOPED_TRACE(rows);
        // points 20 (a chunk's end when rows = 5) and 21 (inside a chunk: snapshot, then a replay to it)
        Engine e(*model, {.max_batch_rows = rows, .max_sequences = 1, .max_context_tokens = 512,
                          .prefix_cache_bytes = uint64_t(256) << 20, .cache_block_tokens = 0});
        EXPECT_EQ(run(e, a, {20, 21}, true).n_cached, 0);
        EXPECT_EQ(run(e, other(21), {}, true).n_cached, 21);
        EXPECT_EQ(run(e, other(20), {}, true).n_cached, 20);
    }
    // without the points recurrent state has nothing there (its prompt's entry serves only its last rows)
    Engine plain(*model, {.max_batch_rows = 64, .max_sequences = 1, .max_context_tokens = 512,
                          .prefix_cache_bytes = uint64_t(256) << 20, .cache_block_tokens = 0});
    run(plain, a, {}, false);
    EXPECT_EQ(run(plain, other(21), {}, true).n_cached, recurrent ? 0 : 21);
    // block boundaries every 8 tokens: a prompt sharing 27 tokens reuses 24 (per-token caches: all 27)
    Engine blocks(*model, {.max_batch_rows = 13, .max_sequences = 1, .max_context_tokens = 512,
                           .prefix_cache_bytes = uint64_t(256) << 20, .cache_block_tokens = 8});
    run(blocks, a, {}, false);
    EXPECT_EQ(run(blocks, other(27), {}, true).n_cached, recurrent ? 24 : 27);
}

// A request that ends with its first token (max_new_tokens 1, or 0: the prompt only) ends in the pass that ran its
// prompt's last chunk: its state still goes into the cache (after that token is out), with its cache points.
TEST_P(PrefixCacheTest, RequestsEndingAtTheirFirstToken) {
    Engine e(*model, {.max_batch_rows = 64, .max_sequences = 1, .max_context_tokens = 512,
                      .prefix_cache_bytes = uint64_t(256) << 20, .cache_block_tokens = 0});
    std::vector<int32_t> p;
    for (size_t i = 0; i < 40; ++i) p.push_back(ids[(i * 3 + i / 5) % ids.size()]);
    RequestParams one;
    one.prompt = p;
    one.max_new_tokens = 1;
    one.stop_at_eos = false;
    one.cache_points = {12};
    std::vector<int32_t> got;
    e.submit(one, [&](const TokenEvent& ev) {
        if (ev.id >= 0) got.push_back(ev.id);
        return true;
    });
    e.run_until_idle();
    EXPECT_EQ(got, alone(p, 1));
    const auto q = concat(p, {ids[1], ids[2]});
    const Outcome b = run_one(e, q, 2);
    EXPECT_EQ(b.ids, alone(q, 2));
    EXPECT_EQ(b.n_cached, int64_t(p.size()));
    const auto r = concat(std::vector<int32_t>(p.begin(), p.begin() + 12), {ids[0], ids[3], ids[2]});
    const Outcome c = run_one(e, r, 2);  // the cache point of the request that ended at once
    EXPECT_EQ(c.ids, alone(r, 2));
    EXPECT_EQ(c.n_cached, r[12] == p[12] ? 13 - int64_t(recurrent) : 12);
    EXPECT_EQ(run_one(e, p, 0).n_cached, int64_t(p.size()) - 1);  // the prompt only
}

// ---- the SSD tier (--state-dir)

struct TempDir {
    std::filesystem::path path;
    TempDir() {
        path = std::filesystem::temp_directory_path() /
               ("sluice-state-dir-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
        std::filesystem::remove_all(path);
    }
    ~TempDir() { std::filesystem::remove_all(path); }
    static int& counter() {
        static int n = 0;
        return n;
    }
    std::vector<std::filesystem::path> files() const {
        std::vector<std::filesystem::path> out;
        for (const auto& e : std::filesystem::directory_iterator(path))
            if (e.path().extension() == ".sluicest") out.push_back(e.path());
        return out;
    }
};

EngineOptions disk_options(const TempDir& d, uint64_t ram_bytes = 0, uint64_t disk_bytes = uint64_t(1) << 30) {
    EngineOptions o{.max_batch_rows = 5, .max_sequences = 2, .max_context_tokens = 512,
                    .prefix_cache_bytes = ram_bytes};
    o.state_dir = d.path.string();
    o.state_dir_bytes = disk_bytes;
    return o;
}

// A conversation's next turn after a restart: the new engine (no RAM tier at all) finds the last turn's state in
// the directory and computes only the new tokens, with exactly the tokens of running alone.
TEST_P(PrefixCacheTest, StateDirServesTheNextTurnAfterARestart) {
    TempDir dir;
    const std::vector<int32_t> p1(ids.begin(), ids.begin() + 8);
    Outcome a;
    {
        Engine e(*model, disk_options(dir));
        a = run_one(e, p1, 4);
        EXPECT_EQ(a.ids, alone(p1, 4));
        EXPECT_GE(e.stats().prefix_cache.disk.writes, 1);
    }
    ASSERT_FALSE(dir.files().empty());
    const auto p2 = concat(concat(p1, a.ids), {ids[1], ids[2], ids[3]});
    Engine e(*model, disk_options(dir));
    EXPECT_GE(e.stats().prefix_cache.disk.entries, 1);
    const Outcome b = run_one(e, p2, 4);
    EXPECT_EQ(b.ids, alone(p2, 4));
    EXPECT_EQ(b.n_cached, int64_t(p1.size() + a.ids.size()) - 1);
    EXPECT_EQ(e.stats().prefix_cache.disk_hits, 1);
}

// Damaged files are never an error and never change output: a flipped byte fails the checksum at load (the file
// is deleted and the prefix computed), a file cut short likewise; a file of another model is skipped at scan.
TEST_P(PrefixCacheTest, StateDirSkipsBadFiles) {
    TempDir dir;
    const std::vector<int32_t> p1(ids.begin(), ids.begin() + 8);
    {
        Engine e(*model, disk_options(dir));
        run_one(e, p1, 2);
    }
    auto files = dir.files();
    ASSERT_FALSE(files.empty());  // recurrent models keep two: the prompt (with its snapshot) and the whole request
    const auto p2 = concat(p1, {ids[4], ids[6]});
    for (int damage = 0; damage < 2; ++damage) {
        for (const auto& path : files) {
            if (damage == 0) {
                std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
                f.seekp(-20, std::ios::end);
                f.put('\x5a');
            } else {
                std::filesystem::resize_file(path, std::filesystem::file_size(path) - 100);
            }
        }
        Engine e(*model, disk_options(dir));
        const Outcome b = run_one(e, p2, 3);
        EXPECT_EQ(b.ids, alone(p2, 3)) << damage;
        EXPECT_EQ(b.n_cached, 0) << damage;
        EXPECT_EQ(e.stats().prefix_cache.disk_hits, 0);
        // the damaged file it tried is gone (others stay until they are tried or evicted); its own state is whole
        files = dir.files();
        int whole = 0;
        for (const auto& path : files) {
            auto fresh = model->new_sequence();
            try {
                load_state(path.string(), model->info().state_file_model(), *fresh);
                ++whole;
            } catch (const std::exception&) {
            }
        }
        EXPECT_GE(whole, 1) << damage;
    }
    // a file from another model (here: the same bytes renamed, with another model's fingerprint in its header)
    {
        std::string bytes;
        {
            std::ifstream f(files[0], std::ios::binary);
            bytes.assign(std::istreambuf_iterator<char>(f), {});
        }
        const size_t at = bytes.find("\"config_xxh3\":\"");
        ASSERT_NE(at, std::string::npos);
        bytes[at + 15] = bytes[at + 15] == '0' ? '1' : '0';
        std::ofstream(dir.path / "foreign.sluicest", std::ios::binary) << bytes;
    }
    Engine e(*model, disk_options(dir));
    EXPECT_EQ(e.stats().prefix_cache.disk.skipped_files, 1);
    EXPECT_TRUE(std::filesystem::exists(dir.path / "foreign.sluicest"));  // not ours to delete
}

// The directory stays within its size (oldest files go), and one that cannot be created turns the tier off.
TEST_P(PrefixCacheTest, StateDirSizeAndUnwritableDirectory) {
    TempDir dir;
    {
        Engine e(*model, disk_options(dir));
        run_one(e, std::vector<int32_t>(ids.begin(), ids.begin() + 6), 2);
    }
    const uint64_t one = std::filesystem::file_size(dir.files().at(0));
    {
        Engine e(*model, disk_options(dir, 0, one * 5 / 2));  // room for two
        for (int i = 1; i < 5; ++i) run_one(e, std::vector<int32_t>(ids.begin() + i, ids.begin() + i + 6), 2);
        EXPECT_LE(e.stats().prefix_cache.disk.bytes, one * 5 / 2);
        EXPECT_GT(e.stats().prefix_cache.disk.evicted, 0);
    }
    uint64_t total = 0;
    for (const auto& f : dir.files()) total += std::filesystem::file_size(f);
    EXPECT_LE(total, one * 5 / 2);

    EngineOptions o = disk_options(dir);
    o.state_dir = "/dev/null/states";
    Engine e(*model, o);  // a warning; no prefix cache at all (no RAM share either)
    const std::vector<int32_t> p(ids.begin(), ids.begin() + 6);
    EXPECT_EQ(run_one(e, p, 2).ids, alone(p, 2));
    EXPECT_EQ(e.stats().prefix_cache.disk.writes, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PrefixCacheTest, ::testing::ValuesIn(fixture_dirs()), fixture_name);

}  // namespace
