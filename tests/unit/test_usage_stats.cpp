// Expert usage statistics (--usage-stats): the file round-trips, a file for another model or a damaged one is
// ignored with one warning, the experts it names are preloaded and held against eviction, held experts that live
// use does not justify are released, and none of it changes a bit of the logits.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "../support/scratch_dir.h"
#include "core/error.h"
#include "experts/expert_cache.h"
#include "experts/usage_stats.h"
#include "models/model.h"
#include "models/synth.h"
#include "runtime/generate.h"
#include "../support/test_util.h"

using namespace sluice;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir(const std::string& name) { return test::scratch_dir("usage_" + name); }

UsageStats sample_stats() {
    UsageStats s;
    s.model = {"DeepseekV3ForCausalLM", 3, 4, 123456, 0x0123456789abcdefull, 0xfedcba9876543210ull};
    s.runs = 2;
    s.counts = {{}, {5, 0, 7, 1}, {0, 0, 0, 9007199254740992ull}};
    return s;
}

}  // namespace

TEST(UsageStatsFile, RoundTripsThroughTheFile) {
    const fs::path dir = temp_dir("rt");
    const UsageStats s = sample_stats();
    const std::string path = (dir / "usage.json").string();
    write_usage_stats(path, s);
    const UsageStats r = read_usage_stats(path);
    EXPECT_EQ(r.model, s.model);
    EXPECT_EQ(r.runs, s.runs);
    EXPECT_EQ(r.counts, s.counts);
    // written atomically: only the file itself remains, no temporary beside it
    EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
    fs::remove_all(dir);
}

TEST(UsageStatsFile, MalformedFilesAreRejectedWithTheirName) {
    const std::string good = serialize_usage_stats(sample_stats());
    auto replaced = [&](const std::string& from, const std::string& to) {
        std::string t = good;
        const size_t at = t.find(from);
        EXPECT_NE(at, std::string::npos) << from;
        return at == std::string::npos ? t : t.replace(at, from.size(), to);
    };
    const std::vector<std::pair<std::string, std::string>> bad = {
        {"truncated", good.substr(0, good.size() / 2)},
        {"empty", ""},
        {"not an object", "[1,2,3]"},
        {"garbage", std::string("\x00\xff\x13 usage", 9)},
        {"format", replaced("sluice-expert-usage", "other-format")},
        {"version", replaced("\"version\":1", "\"version\":2")},
        {"negative count", replaced("[5,0,7,1]", "[5,0,-7,1]")},
        {"fractional count", replaced("[5,0,7,1]", "[5,0,7.5,1]")},
        {"count too large", replaced("9007199254740992", "9007199254740993")},
        {"short row", replaced("[5,0,7,1]", "[5,0,7]")},
        {"long row", replaced("[5,0,7,1]", "[5,0,7,1,3]")},
        {"layers", replaced("\"layers\":3", "\"layers\":4")},
        {"zero layers", replaced("\"layers\":3", "\"layers\":0")},
        {"huge experts", replaced("\"experts_per_layer\":4", "\"experts_per_layer\":99999999")},
        {"hash", replaced("0123456789abcdef", "0123456789abcdeg")},
        {"missing model", replaced("\"model\"", "\"modal\"")},
    };
    EXPECT_NO_THROW(parse_usage_stats(good, "good.json"));
    for (const auto& [what, text] : bad) {
        try {
            parse_usage_stats(text, "usage.json");
            ADD_FAILURE() << what << ": accepted";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("usage.json"), std::string::npos) << what << ": " << e.what();
        }
    }
}

TEST(UsageStatsFile, MergeHalvesOldCountsAndChoosesTheMostUsed) {
    const UsageStats old = sample_stats();
    const std::vector<std::vector<uint64_t>> live = {{}, {1, 2, 0, 0}, {3, 0, 0, 0}};
    const UsageStats m = merge_usage(&old, old.model, live);
    EXPECT_EQ(m.runs, 3u);
    const std::vector<std::vector<uint64_t>> want = {{}, {3, 2, 3, 0}, {3, 0, 0, 4503599627370496ull}};
    EXPECT_EQ(m.counts, want);
    EXPECT_EQ(merge_usage(nullptr, old.model, live).counts, live);
    // most used first, ties by (layer, expert); zero counts never chosen
    const auto pins = choose_pins(m, 4);
    const std::vector<ExpertKey> want_pins = {{2, 3}, {1, 0}, {1, 2}, {2, 0}};
    EXPECT_EQ(pins, want_pins);
    EXPECT_EQ(choose_pins(m, 100).size(), 5u);
    EXPECT_TRUE(choose_pins(m, 0).empty());
}

TEST(ExpertCacheHold, HeldExpertsAreNeverEvicted) {
    ExpertCache cache(4 * 4096, 4096, 2, make_lru_policy(4));
    for (int e = 0; e < 4; ++e) {
        ASSERT_NE(cache.insert({1, e}), nullptr);
        cache.unpin({1, e});
    }
    EXPECT_TRUE(cache.hold({1, 0}));
    EXPECT_TRUE(cache.hold({1, 1}));
    EXPECT_FALSE(cache.hold({1, 9}));  // not cached
    EXPECT_EQ(cache.n_held(), 2u);
    for (int e = 10; e < 30; ++e) {  // churn through the two free slots
        ASSERT_NE(cache.insert({1, e}), nullptr);
        cache.unpin({1, e});
    }
    EXPECT_TRUE(cache.contains({1, 0}));
    EXPECT_TRUE(cache.contains({1, 1}));
    ASSERT_NE(cache.acquire({1, 0}), nullptr);
    cache.unpin({1, 0});
    EXPECT_EQ(cache.layer_stats()[1].held_hits, 1u);
    // holding every slot leaves nothing to evict; releasing makes a held expert evictable again
    EXPECT_TRUE(cache.hold({1, 28}));
    EXPECT_TRUE(cache.hold({1, 29}));
    EXPECT_EQ(cache.insert({1, 40}), nullptr);
    cache.release({1, 0});
    EXPECT_FALSE(cache.held({1, 0}));
    ASSERT_NE(cache.insert({1, 40}), nullptr);
    EXPECT_FALSE(cache.contains({1, 0}));
    cache.unpin({1, 40});
    cache.drop({1, 1});
    EXPECT_EQ(cache.n_held(), 2u);
}

namespace {

// A small Kimi-K2-shaped model on disk, shared by the tests below.
class UsagePinning : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        dir_ = new fs::path(temp_dir("model"));
        SynthOptions o = test::small_k2_options(dir_->string(), 4, 32, 32);
        o.seed = 11;
        synth_checkpoint(o);
    }
    static void TearDownTestSuite() {
        fs::remove_all(*dir_);
        delete dir_;
    }

    std::unique_ptr<Model> load(const std::string& usage, uint64_t cache_experts = 16, int64_t check_fetches = 64) {
        LoadOptions opt{.n_threads = 2, .stream_experts = true};
        auto probe = load_model(dir_->string(), {.n_threads = 1, .stream_experts = true});
        opt.streaming.cache_bytes = cache_experts * probe->streaming()->slot_bytes();  // exactly that many slots
        opt.streaming.prefetch = false;  // hit counts depend on pins and the policy only
        opt.streaming.usage_stats_path = usage;
        opt.streaming.pin_check_fetches = check_fetches;
        return load_model(dir_->string(), opt);
    }
    static StreamingExpertSource& source(Model& m) { return const_cast<StreamingExpertSource&>(*m.streaming()); }
    static double hit_rate(const Model& m) {
        const auto c = m.streaming()->cache().total_stats();
        return double(c.hits) / double(std::max<uint64_t>(1, c.hits + c.misses));
    }
    std::string usage_path(const std::string& name) const { return (*dir_ / name).string(); }

    std::vector<int32_t> prompt_ = {1, 7, 300, 42, 42, 9, 128, 255, 3, 77, 500, 64, 2, 19, 88, 400,
                                    1, 7, 300, 42, 42, 9, 128, 255, 3, 77, 500, 64, 2, 19, 88, 400};
    static fs::path* dir_;
};
fs::path* UsagePinning::dir_ = nullptr;

}  // namespace

TEST_F(UsagePinning, FileIsWrittenPinsApplyAndLogitsStayIdentical) {
    const std::string path = usage_path("good.json");
    fs::remove(path);
    auto resident = load_model(dir_->string(), {.n_threads = 2});
    const auto want = prompt_logits(*resident, prompt_, 4);

    double cold_rate = 0;
    {
        auto cold = load(path);
        EXPECT_FALSE(source(*cold).pin_stats().file_used);
        EXPECT_EQ(prompt_logits(*cold, prompt_, 4), want);
        cold_rate = hit_rate(*cold);
    }  // destroyed cleanly: the file is written
    ASSERT_TRUE(fs::exists(path));
    const UsageStats written = read_usage_stats(path);
    EXPECT_EQ(written.runs, 1u);
    EXPECT_EQ(written.model.n_layers, 4);
    EXPECT_EQ(written.model.experts_per_layer, 32);
    EXPECT_EQ(written.model.architecture, "DeepseekV3ForCausalLM");
    uint64_t rows = 0;
    for (const auto& layer : written.counts)
        for (uint64_t c : layer) rows += c;
    EXPECT_EQ(rows, uint64_t(prompt_.size()) * 3 * 8);  // every token, 3 MoE layers, top-8

    auto warm = load(path);
    const auto& ps = source(*warm).pin_stats();
    EXPECT_TRUE(ps.file_used);
    EXPECT_TRUE(ps.warning.empty());
    const size_t half = warm->streaming()->cache().n_slots() / 2;
    ASSERT_EQ(half, 8u);
    EXPECT_EQ(ps.pinned_at_load, half);  // at most half the slots (the file names more experts than that)
    EXPECT_EQ(warm->streaming()->cache().n_held(), half);
    EXPECT_EQ(prompt_logits(*warm, prompt_, 4), want);
    EXPECT_GT(warm->streaming()->cache().total_stats().held_hits, 0u);
    EXPECT_GT(hit_rate(*warm), cold_rate);
    // the pinned experts are exactly the file's most used
    for (const ExpertKey& k : choose_pins(written, half)) EXPECT_TRUE(warm->streaming()->cache().contains(k));
    warm.reset();
    const UsageStats again = read_usage_stats(path);
    EXPECT_EQ(again.runs, 2u);
    for (size_t l = 0; l < again.counts.size(); ++l)
        for (size_t e = 0; e < again.counts[l].size(); ++e)
            EXPECT_EQ(again.counts[l][e], written.counts[l][e] / 2 + written.counts[l][e]) << l << "/" << e;
}

TEST_F(UsagePinning, ForeignOrDamagedFilesAreIgnoredWithOneWarning) {
    const std::string good = usage_path("source.json");
    fs::remove(good);
    {
        auto m = load(good);
        prompt_logits(*m, prompt_, 8);
    }
    const std::string text = test::read_bytes(good);
    auto resident = load_model(dir_->string(), {.n_threads = 2});
    const auto want = prompt_logits(*resident, prompt_, 8);
    UsageStats foreign = read_usage_stats(good);
    foreign.model.config_hash ^= 1;
    UsageStats wrong_layers = read_usage_stats(good);
    wrong_layers.model.n_layers = 5;
    wrong_layers.counts.push_back({});
    UsageStats dense_row = read_usage_stats(good);
    dense_row.counts[0] = std::vector<uint64_t>(32, 5);  // layer 0 is dense: no experts to count there
    const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
        {"foreign", serialize_usage_stats(foreign), "another model"},
        {"layers", serialize_usage_stats(wrong_layers), "another model"},
        {"dense", serialize_usage_stats(dense_row), "counts[0]"},
        {"truncated", text.substr(0, text.size() - 40), "not valid JSON"},
        {"garbage", std::string(300, '\x07'), "not valid JSON"},
        {"range", std::string(text).replace(text.find("\"runs\":1"), 8, "\"runs\":-1"), "runs"},
    };
    for (const auto& [name, contents, reason] : cases) {
        const std::string path = usage_path(name + ".json");
        test::write_bytes(path, contents);
        testing::internal::CaptureStderr();
        auto m = load(path);
        const std::string err = testing::internal::GetCapturedStderr();
        const auto& ps = source(*m).pin_stats();
        EXPECT_FALSE(ps.file_used) << name;
        EXPECT_EQ(ps.pinned_at_load, 0u) << name;
        EXPECT_EQ(m->streaming()->cache().n_held(), 0u) << name;
        EXPECT_NE(ps.warning.find(path), std::string::npos) << name << ": " << ps.warning;
        EXPECT_NE(ps.warning.find(reason), std::string::npos) << name << ": " << ps.warning;
        // one warning line, naming the file (other lines may say how experts are read on this file system)
        size_t warnings = 0;
        for (size_t at = err.find("warning"); at != std::string::npos; at = err.find("warning", at + 1)) ++warnings;
        EXPECT_EQ(warnings, 1u) << name << ": " << err;
        EXPECT_NE(err.find(path), std::string::npos) << name << ": " << err;
        EXPECT_EQ(prompt_logits(*m, prompt_, 8), want) << name;
        m.reset();
        EXPECT_NO_THROW(read_usage_stats(path)) << name << ": rewritten from this run's use";
    }
}

TEST_F(UsagePinning, HeldExpertsSurviveChurnAndStaleOnesAreReleased) {
    // a file claiming layer 1's experts 0..3 are the hot ones
    const std::string path = usage_path("stale.json");
    fs::remove(path);
    {
        auto m = load(path);
        prompt_logits(*m, prompt_, 8);
    }
    UsageStats s = read_usage_stats(path);
    for (auto& layer : s.counts) std::fill(layer.begin(), layer.end(), 0);
    for (int e = 0; e < 4; ++e) s.counts[1][size_t(e)] = 1000;
    write_usage_stats(path, s);

    auto m = load(path, 8, 64);
    auto& src = source(*m);
    ASSERT_EQ(src.pin_stats().pinned_at_load, 4u);
    // 63 fetches of other experts (one short of a re-check): the held experts survive all the churn
    std::vector<int32_t> others = {8, 9, 10, 11, 12, 13, 14, 15};
    const std::vector<uint32_t> rows(others.size(), 1);
    auto noop = [](size_t, const ExpertWeights&) {};
    for (int i = 0; i < 63; ++i) {
        for (auto& e : others) e = 8 + (e - 8 + 3) % 24;
        src.note_use(1, others, rows);
        src.fetch(1, others, noop);
    }
    for (int e = 0; e < 4; ++e) EXPECT_TRUE(m->streaming()->cache().held({1, e})) << e;
    EXPECT_EQ(src.pin_stats().released, 0u);
    // the 64th fetch re-checks: unused for a whole window, the pins go
    src.note_use(1, others, rows);
    src.fetch(1, others, noop);
    EXPECT_EQ(src.pin_stats().released, 4u);
    EXPECT_EQ(m->streaming()->cache().n_held(), 0u);

    // pins that live use keeps justifying stay
    auto k = load(path, 8, 64);
    auto& ks = source(*k);
    ASSERT_EQ(ks.pin_stats().pinned_at_load, 4u);
    const std::vector<int32_t> hot = {0, 1, 2, 3, 20};
    const std::vector<uint32_t> hot_rows = {4, 4, 4, 4, 1};
    for (int i = 0; i < 200; ++i) {
        ks.note_use(1, hot, hot_rows);
        ks.fetch(1, hot, noop);
    }
    EXPECT_EQ(ks.pin_stats().released, 0u);
    EXPECT_EQ(k->streaming()->cache().n_held(), 4u);
}
