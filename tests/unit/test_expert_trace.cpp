// Expert traces (--trace-experts): the file round-trips; a truncated file (cut anywhere), a damaged one and one for
// another model are rejected with an Error that says so; and a traced streaming run records every MoE layer of every
// pass with exactly the cache's hits and the rows' choices, without changing a generated token.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "../support/scratch_dir.h"
#include "core/error.h"
#include "experts/expert_trace.h"
#include "experts/streaming_expert_source.h"
#include "models/model.h"
#include "models/synth.h"
#include "runtime/generate.h"
#include "../support/test_util.h"

using namespace sluice;
namespace fs = std::filesystem;

namespace {

TraceHeader sample_header() {
    TraceHeader h;
    h.n_layers = 3;
    h.n_experts = 8;
    h.cache_slots = 5;
    h.config_xxh3 = 0x0123456789abcdefull;
    h.weights_xxh3 = 0xfedcba9876543210ull;
    h.prefetch = true;
    h.architecture = "DeepseekV3ForCausalLM";
    h.policy = "lru";
    return h;
}

using Flags = std::vector<std::pair<uint16_t, uint8_t>>;

// Two threads, experts streamed into a cache of `slots` expert slots, the run traced to trace_path.
LoadOptions traced_streaming(const std::string& model_dir, int64_t slots, const std::string& trace_path) {
    LoadOptions opt{.n_threads = 2, .stream_experts = true};
    auto probe = load_model(model_dir, {.n_threads = 1, .stream_experts = true});
    opt.streaming.cache_bytes = uint64_t(slots) * probe->streaming()->slot_bytes();
    opt.streaming.trace_path = trace_path;
    return opt;
}

// Two passes: a two-row prefill over layers 1 and 2, then a one-row decode over the same layers.
void write_sample(const std::string& path) {
    ExpertTraceWriter w(path, sample_header());
    w.write(1, 2, 2, std::vector<int32_t>{0, 3, 3, 7}, Flags{{0, 0}, {3, 1}, {7, 0}}, Flags{});
    w.write(2, 2, 2, std::vector<int32_t>{1, 2, 2, 5}, Flags{{1, 2}, {2, 3}, {5, 0}}, Flags{{1, 1}, {2, 0}, {6, 1}});
    w.write(1, 2, 1, std::vector<int32_t>{3, 4}, Flags{{3, 1}, {4, 0}}, Flags{});
    w.write(2, 2, 1, std::vector<int32_t>{2, 6}, Flags{{2, 1}, {6, 0}}, Flags{{6, 2}, {7, 2}});
    w.close();
}

std::string error_of(const std::string& path) {
    return test::error_of([&] { read_expert_trace(path); });
}

}  // namespace

TEST(ExpertTraceFile, RoundTrips) {
    const fs::path dir = test::scratch_dir("trace_rt");
    const std::string path = (dir / "t.trace").string();
    write_sample(path);
    const ExpertTrace t = read_expert_trace(path);
    const TraceHeader h = sample_header();
    EXPECT_EQ(t.header.n_layers, h.n_layers);
    EXPECT_EQ(t.header.n_experts, h.n_experts);
    EXPECT_EQ(t.header.cache_slots, h.cache_slots);
    EXPECT_EQ(t.header.config_xxh3, h.config_xxh3);
    EXPECT_EQ(t.header.weights_xxh3, h.weights_xxh3);
    EXPECT_TRUE(t.header.prefetch);
    EXPECT_EQ(t.header.architecture, h.architecture);
    EXPECT_EQ(t.header.policy, "lru");
    ASSERT_EQ(t.records.size(), 4u);
    EXPECT_EQ(t.records[0].pass, 0u);
    EXPECT_EQ(t.records[1].pass, 0u);
    EXPECT_EQ(t.records[2].pass, 1u);  // layer 1 after layer 2: a new pass
    EXPECT_EQ(t.records[3].pass, 1u);
    EXPECT_EQ(t.records[1].layer, 2);
    EXPECT_EQ(t.records[1].top_k, 2);
    EXPECT_EQ(t.records[1].n_rows, 2u);
    EXPECT_EQ(t.records[1].choices, (std::vector<uint16_t>{1, 2, 2, 5}));
    EXPECT_EQ(t.records[1].distinct, (Flags{{1, 2}, {2, 3}, {5, 0}}));
    EXPECT_EQ(t.records[1].hints, (Flags{{1, 1}, {2, 0}, {6, 1}}));
    EXPECT_EQ(t.records[3].hints, (Flags{{6, 2}, {7, 2}}));
    check_trace_model(t, path, h.config_xxh3, h.weights_xxh3, 8);  // the same model: no error
    fs::remove_all(dir);
}

TEST(ExpertTraceFile, EveryTruncationIsAnError) {
    const fs::path dir = test::scratch_dir("trace_cut");
    const std::string path = (dir / "t.trace").string();
    write_sample(path);
    const std::string whole = test::read_bytes(path);
    const std::string cut_path = (dir / "cut.trace").string();
    for (size_t n = 0; n < whole.size(); ++n) {
        test::write_bytes(cut_path, whole.substr(0, n));
        const std::string err = error_of(cut_path);
        EXPECT_NE(err.find("truncated"), std::string::npos) << "cut at " << n << " of " << whole.size() << ": " << err;
    }
    fs::remove_all(dir);
}

TEST(ExpertTraceFile, DamagedFilesAreErrors) {
    const fs::path dir = test::scratch_dir("trace_bad");
    const std::string path = (dir / "t.trace").string();
    write_sample(path);
    const std::string whole = test::read_bytes(path);
    const std::string bad = (dir / "bad.trace").string();
    auto expect_error = [&](const std::string& bytes, const std::string& words) {
        test::write_bytes(bad, bytes);
        const std::string err = error_of(bad);
        EXPECT_NE(err.find(words), std::string::npos) << "wanted '" << words << "', got '" << err << "'";
    };
    expect_error("{\"model\": 1}\nnot a trace at all", "not an expert trace");
    std::string v = whole;
    v[8] = 2;  // version 2
    expect_error(v, "version 2");
    expect_error(whole + "x", "after the end marker");
    // the header is 8 + 4 * 4 + 2 * 8 + 1 + 1 + 21 ("DeepseekV3ForCausalLM") + 1 + 3 ("lru") = 67 bytes; the first
    // record's first choice is at 67 + 16
    const size_t first_choice = 67 + 16;
    ASSERT_EQ(whole[67], 'R');
    std::string r = whole;
    r[first_choice] = 9;  // expert 9 of 8
    expect_error(r, "expert 9 of 8");
    r = whole;
    r[first_choice] = 1;  // the rows now choose {1, 3, 7}, the fetch says {0, 3, 7}
    expect_error(r, "no row chose it");
    r = whole;
    r[67] = 'Q';
    expect_error(r, "neither a record nor the end marker");
    fs::remove_all(dir);
}

TEST(ExpertTraceFile, AnotherModelIsAnError) {
    const fs::path dir = test::scratch_dir("trace_model");
    const std::string path = (dir / "t.trace").string();
    write_sample(path);
    const ExpertTrace t = read_expert_trace(path);
    const TraceHeader h = sample_header();
    auto error_for = [&](uint64_t c, uint64_t w, int64_t e) -> std::string {
        try {
            check_trace_model(t, path, c, w, e);
        } catch (const Error& err) {
            return err.what();
        }
        return "";
    };
    EXPECT_NE(error_for(h.config_xxh3 + 1, h.weights_xxh3, 8).find("another model: config.json hash"), std::string::npos);
    EXPECT_NE(error_for(h.config_xxh3, h.weights_xxh3 ^ 4, 8).find("another model: weights hash"), std::string::npos);
    EXPECT_NE(error_for(h.config_xxh3, h.weights_xxh3, 16).find("8 experts per layer vs 16"), std::string::npos);
    fs::remove_all(dir);
}

TEST(ExpertTraceRun, RecordsEveryLayerOfEveryPassAsTheCacheSawIt) {
    const fs::path dir = test::scratch_dir("trace_run");
    SynthOptions o = test::small_k2_options((dir / "model").string(), 4, 32, 32);
    o.seed = 5;
    synth_checkpoint(o);
    const std::vector<int32_t> prompt = {1, 7, 300, 42, 42, 9, 128, 255, 3, 77, 500, 64};
    GenerateOptions g;
    g.max_new_tokens = 12;
    g.prefill_chunk = 5;  // three prefill passes, then one per decoded token after the first
    g.stop_at_eos = false;

    auto plain = load_model(o.out_dir, {.n_threads = 2});
    const GenerateResult want = generate(*plain, prompt, g);

    const std::string path = (dir / "run.trace").string();
    const LoadOptions opt = traced_streaming(o.out_dir, 20, path);
    LayerCacheStats cache;
    ExpertIoStats io;
    int64_t n_moe_layers = 0;
    uint64_t config_xxh3 = 0, weights_xxh3 = 0;
    {
        auto m = load_model(o.out_dir, opt);
        const GenerateResult got = generate(*m, prompt, g);
        EXPECT_EQ(got.ids, want.ids);  // tracing never changes a token
        cache = m->streaming()->cache().total_stats();
        io = m->streaming()->stats();
        n_moe_layers = m->info().n_moe_layers;
        config_xxh3 = m->info().config_xxh3;
        weights_xxh3 = m->info().weights_xxh3;
    }  // the trace is closed with the model
    {
        // the policy only changes what is read: every policy generates the same tokens
        for (const char* policy : {"lfu", "next-use", "markov"}) {
            LoadOptions po = opt;
            po.streaming.trace_path.clear();
            po.streaming.policy = policy;
            auto m = load_model(o.out_dir, po);
            EXPECT_EQ(generate(*m, prompt, g).ids, want.ids) << policy;
        }
    }
    const ExpertTrace t = read_expert_trace(path);
    check_trace_model(t, path, config_xxh3, weights_xxh3, 32);
    EXPECT_EQ(t.header.cache_slots, 20u);
    const uint64_t passes = 3 + (g.max_new_tokens - 1);
    ASSERT_EQ(t.records.size(), passes * uint64_t(n_moe_layers));
    EXPECT_EQ(t.records.back().pass, passes - 1);
    uint64_t hits = 0, misses = 0, rows = 0, read_ahead_used = 0, hinted_reads = 0;
    for (const auto& r : t.records) {
        EXPECT_EQ(r.top_k, t.records[0].top_k);
        EXPECT_GT(r.top_k, 1);
        rows += r.n_rows;
        for (const auto& [e, f] : r.distinct) {
            (f & k_trace_hit ? hits : misses) += 1;
            read_ahead_used += (f & k_trace_read_ahead) ? 1 : 0;
        }
        for (const auto& [e, f] : r.hints) hinted_reads += f == k_hint_read ? 1 : 0;
    }
    EXPECT_EQ(hits, cache.hits);
    EXPECT_EQ(misses, cache.misses);
    EXPECT_EQ(rows, uint64_t(prompt.size() + g.max_new_tokens - 1) * uint64_t(n_moe_layers));
    EXPECT_EQ(read_ahead_used, io.prefetch_used);
    EXPECT_EQ(hinted_reads, io.prefetch_issued);
    EXPECT_GT(hinted_reads, 0u);  // the look-ahead ran and was traced
    fs::remove_all(dir);
}

// A prefill chunk's MoE layer pins nearly every cache slot when the next MoE layer's read-ahead hint arrives; what
// the hint could not read waits for the slots the layer frees as its experts are computed, so by the next layer's
// fetch its experts are resident (StreamingExpertSource::resume_deferred). Before, the hint read as many as had free
// slots and the next layer read the rest on demand: here 2 of its 8. The first MoE layer is hinted by the dense layer
// before it, while its MLP computes (before, it read all 8 on demand).
TEST(ExpertTraceRun, PrefillReadsTheNextLayerAheadIntoFreedSlots) {
    const fs::path dir = test::scratch_dir("trace_deferred");
    SynthOptions o = test::small_k2_options((dir / "model").string(), 4, 8, 32);
    o.seed = 3;
    synth_checkpoint(o);
    std::vector<int32_t> prompt;
    for (int32_t i = 0; i < 64; ++i) prompt.push_back((i * 37 + 11) % 500);
    GenerateOptions g;
    g.max_new_tokens = 1;
    g.prefill_chunk = 64;  // one pass of 64 rows: every layer uses all 8 experts
    g.stop_at_eos = false;
    auto plain = load_model(o.out_dir, {.n_threads = 2});
    const GenerateResult want = generate(*plain, prompt, g);

    const std::string path = (dir / "run.trace").string();
    {
        auto m = load_model(o.out_dir, traced_streaming(o.out_dir, 10, path));  // a layer's 8 experts and 2 more
        EXPECT_EQ(generate(*m, prompt, g).ids, want.ids);
    }
    const ExpertTrace t = read_expert_trace(path);
    EXPECT_EQ(t.header.cache_slots, 10u);
    ASSERT_GE(t.records.size(), 3u);
    int64_t checked = 0;
    for (const auto& r : t.records) {
        if (r.pass != 0) continue;  // the first MoE layer's hint comes from the dense layer before it
        EXPECT_EQ(r.distinct.size(), 8u) << "layer " << r.layer;
        for (const auto& [e, f] : r.distinct) {
            EXPECT_TRUE(f & k_trace_hit) << "layer " << r.layer << " expert " << e << " was read on demand";
            EXPECT_TRUE(f & k_trace_read_ahead) << "layer " << r.layer << " expert " << e;
        }
        ++checked;
    }
    EXPECT_EQ(checked, 3);
    fs::remove_all(dir);
}

// The read-ahead driven directly: a cache of 10 slots, the first two MoE layers' experts 0..7, LRU.
class ReadAhead : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = test::scratch_dir("read_ahead");
        SynthOptions o = test::small_k2_options((dir_ / "model").string(), 4, 8, 32);
        synth_checkpoint(o);
        LoadOptions opt{.n_threads = 1, .stream_experts = true};
        auto probe = load_model(o.out_dir, opt);
        opt.streaming.cache_bytes = 10 * probe->streaming()->slot_bytes();
        opt.streaming.policy = "lru";
        model_ = load_model(o.out_dir, opt);
        const auto& where = source().layout().where;
        for (size_t l = 0; l < where.size(); ++l)
            if (!where[l].empty()) moe_.push_back(int64_t(l));
        ASSERT_GE(moe_.size(), 2u);
    }
    void TearDown() override {
        model_.reset();
        fs::remove_all(dir_);
    }
    StreamingExpertSource& source() { return const_cast<StreamingExpertSource&>(*model_->streaming()); }
    void fetch(int64_t layer, std::vector<int32_t> experts) {
        source().fetch_groups(layer, experts, [](std::span<const ReadyExpert>) {});
    }
    // How many of `layer`'s experts 0..7 a fetch finds in the cache.
    uint64_t hits_of_all(int64_t layer) {
        const uint64_t before = source().cache().layer_stats()[size_t(layer)].hits;
        fetch(layer, all_);
        return source().cache().layer_stats()[size_t(layer)].hits - before;
    }
    fs::path dir_;
    std::unique_ptr<Model> model_;
    std::vector<int64_t> moe_;
    std::vector<int32_t> all_ = {0, 1, 2, 3, 4, 5, 6, 7};
};

// The hint finds experts 0 and 1 of the next layer resident (the least recently used slots) and every other slot
// pinned by the fetch in progress; the 6 it reads once that fetch frees slots must not evict those 2.
TEST_F(ReadAhead, HintKeepsTheExpertsItFoundResident) {
    const int64_t a = moe_[0], b = moe_[1];
    fetch(b, {0, 1});
    source().fetch_groups(a, all_, [](std::span<const ReadyExpert>) {}, [&] { source().prefetch(b, all_); });
    EXPECT_EQ(hits_of_all(b), 8u);
}

// The hint reads 2 experts into the 2 free slots and waits for the rest; the fetch in progress frees its 4 cache
// hits first (after a pause in which the 2 read-aheads land), then its 4 misses. The 6 read when slots free must not
// evict the 2 that landed: they wait for the second group. (Before, a landed read-ahead was unpinned when the rest
// resumed, and 2 of the next layer's 8 were read on demand when reads landed before the fetch's first group was
// computed: CI saw it.)
TEST_F(ReadAhead, LandedReadAheadsAreNotEvictedByTheirOwnHint) {
    const int64_t a = moe_[0], b = moe_[1];
    fetch(a, {0, 1, 2, 3});
    int groups = 0;
    source().fetch_groups(
        a, all_,
        [&](std::span<const ReadyExpert>) {
            if (groups++ == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
        },
        [&] { source().prefetch(b, all_); });
    EXPECT_GE(groups, 2);
    EXPECT_EQ(hits_of_all(b), 8u);
}

TEST(ExpertTraceRun, ResidentExpertsCannotBeTraced) {
    const fs::path dir = test::scratch_dir("trace_resident");
    const SynthOptions o = test::small_k2_options((dir / "model").string(), 2, 8, 64);
    synth_checkpoint(o);
    LoadOptions opt{.n_threads = 1};
    opt.streaming.trace_path = (dir / "t.trace").string();
    try {
        load_model(o.out_dir, opt);
        ADD_FAILURE() << "loaded";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("--memory SIZE or --stream"), std::string::npos) << e.what();
    }
    fs::remove_all(dir);
}
