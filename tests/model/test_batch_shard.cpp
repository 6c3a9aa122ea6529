// A batch job split into shards (api/batch_shard): the spec's bad forms, a pinned share function, N shards merged
// equal to one run (same lines in input order, same bodies but for the per-run ids and timestamps), merge refusing
// shards of other inputs or splits, missing, repeated, unfinished or misplaced shards, resume per shard, and the
// second pass reading the input as it goes.
#include <gtest/gtest.h>

#include <functional>
#include <streambuf>

#include "../support/batch_fixture.h"
#include "api/batch_shard.h"
#include "api/completion_job.h"
#include "core/error.h"

using namespace sluice;
using namespace sluice::test::batch;

namespace {

// Lines for every shard of 3: chat and text, greedy and seeded sampling, n = 2, one line per request.
std::vector<std::string> shard_input() {
    std::vector<std::string> v = mixed_input();
    for (int i = 0; i < 9; ++i)
        v.push_back(i % 2 ? chat_line("chat-" + std::to_string(i), "Line number " + std::to_string(i), 4 + i).dump()
                          : completion_line("text-" + std::to_string(i), "Item " + std::to_string(i), 3 + i,
                                            {{"temperature", 0.8}, {"seed", i}})
                                .dump());
    return v;
}

// The custom_ids in the file's order.
std::vector<std::string> ids_in_order(const fs::path& p) {
    std::vector<std::string> v;
    for (const auto& l : read_lines(p)) v.push_back(l["custom_id"].is_string() ? l["custom_id"].get<std::string>() : "");
    return v;
}

// Runs shards 0..n-1 of dir/in.jsonl into dir/I/results.jsonl; returns their output paths.
std::vector<std::string> run_shards(Loaded& m, const fs::path& dir, int64_t n, api::BatchOptions o = {}) {
    std::vector<std::string> outs;
    for (int64_t i = 0; i < n; ++i) {
        api::BatchOptions so = o;
        so.shard = {i, n};
        so.output_path = (dir / std::to_string(i) / "results.jsonl").string();  // a folder made by the runner
        const auto s = run(m, dir, 1 + i % 3, so);  // each machine with its own number of sequences
        EXPECT_EQ(s.status, "completed") << i;
        outs.push_back(so.output_path);
    }
    return outs;
}

api::MergeSummary merge(const fs::path& dir, const std::vector<std::string>& outs) {
    api::MergeOptions mo;
    mo.input_path = (dir / "in.jsonl").string();
    mo.output_path = (dir / "merged.jsonl").string();
    mo.shard_outputs = outs;
    return api::merge_batch_shards(mo);
}

// The Error merge throws, or "" when it succeeds.
std::string merge_error(const fs::path& dir, const std::vector<std::string>& outs) {
    try {
        merge(dir, outs);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

void edit_json(const fs::path& p, const std::function<void(json&)>& f) {
    json j = json::parse(read(p));
    f(j);
    std::ofstream(p, std::ios::binary) << j.dump(2) << "\n";
}

}  // namespace

TEST(BatchShard, SpecsOutOfRangeOrMalformedAreOneClearError) {
    EXPECT_EQ(api::parse_shard_spec("0/1").count, 1);
    const api::ShardSpec s = api::parse_shard_spec("3/4");
    EXPECT_EQ(s.index, 3);
    EXPECT_EQ(s.count, 4);
    const std::vector<std::pair<std::string, std::string>> bad = {
        {"0/0", "the number of shards must be at least 1"},
        {"3/2", "shard index 3 is out of range for 2 shards (0 to 1)"},
        {"2/2", "shard index 2 is out of range for 2 shards"},
        {"-1/2", "the shard index must be 0 or more"},
        {"junk", "not I/N"},
        {"1/", "not I/N"},
        {"/2", "not I/N"},
        {"1/2/3", "not I/N"},
        {" 1/2", "not I/N"},
        {"+1/2", "not I/N"},
        {"0x1/2", "not I/N"},
        {"0/100001", "at most 100000 shards"},
        {"", "the shard index must be 0 or more"},
    };
    for (const auto& [spec, want] : bad) {
        try {
            api::parse_shard_spec(spec);
            ADD_FAILURE() << "accepted '" << spec << "'";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("--shard '" + spec + "': " + want), std::string::npos) << e.what();
        }
    }
}

// The share must not change between versions or machines (a resumed or re-run shard must take the same lines):
// XXH3-64 of the custom_id mod N, pinned here.
TEST(BatchShard, ShareIsXxh3OfTheCustomIdModN) {
    EXPECT_EQ(api::shard_of("", 1), 0);
    std::vector<int64_t> got;
    for (const char* id : {"request-1", "request-2", "request-3", "c1", "p1"}) got.push_back(api::shard_of(id, 7));
    EXPECT_EQ(got, (std::vector<int64_t>{4, 6, 4, 6, 4}));
    // about a third each over many ids
    std::vector<int> per(3);
    for (int i = 0; i < 3000; ++i) ++per[size_t(api::shard_of("id-" + std::to_string(i), 3))];
    for (int c : per) EXPECT_NEAR(c, 1000, 100);
}

TEST(BatchShard, MergedShardsEqualOneRun) {
    Loaded m;
    const fs::path one = test::scratch_dir("shard_one"), sh = test::scratch_dir("shard_three");
    std::vector<std::string> input = shard_input();
    input.insert(input.begin() + 3, "{not json");                                     // no custom_id: shard 0
    input.insert(input.begin() + 7, chat_line("hot", "x", 3, {{"temperature", 9}}).dump());  // its id's shard
    input.insert(input.begin() + 9, "");
    write_lines(one / "in.jsonl", input);
    write_lines(sh / "in.jsonl", input);
    api::BatchOptions o;
    o.continue_on_invalid = true;
    const auto whole = run(m, one, 2, o);
    ASSERT_EQ(whole.status, "completed");
    const auto outs = run_shards(m, sh, 3, o);
    int64_t shard_totals = 0;
    for (int64_t i = 0; i < 3; ++i) {
        const json st = json::parse(read(api::with_suffix(outs[size_t(i)], ".status.json")));
        EXPECT_EQ(st["shard"], (json{{"index", i}, {"count", 3}}));
        EXPECT_EQ(st["input_xxh3"], api::file_xxh3((sh / "in.jsonl").string()));
        shard_totals += st["request_counts"]["total"].get<int64_t>();
        EXPECT_GT(read_lines(outs[size_t(i)]).size(), 0u) << "every shard has lines to run";
        for (const auto& id : ids_in_order(outs[size_t(i)])) EXPECT_EQ(api::shard_of(id, 3), i) << id;
    }
    EXPECT_EQ(shard_totals, whole.total);

    const auto ms = merge(sh, outs);
    EXPECT_EQ(ms.shards, 3);
    EXPECT_EQ(ms.completed, whole.completed);
    EXPECT_EQ(ms.failed, whole.failed);
    // the same answers (custom_id -> body without id and created), in input order
    EXPECT_EQ(bodies(sh / "merged.jsonl"), bodies(one / "out.jsonl"));
    std::vector<std::string> want_order;
    for (const auto& l : input)
        if (auto j = json::parse(l, nullptr, false); j.is_object() && j["custom_id"] != "hot")
            want_order.push_back(j["custom_id"]);
    EXPECT_EQ(ids_in_order(sh / "merged.jsonl"), want_order);
    // the error file: the line without a custom_id first, then the rest in input order; bodies as in one run
    EXPECT_EQ(ids_in_order(sh / "merged.errors.jsonl"), (std::vector<std::string>{"", "hot"}));
    const auto e_one = read_lines(one / "out.errors.jsonl"), e_sh = read_lines(sh / "merged.errors.jsonl");
    ASSERT_EQ(e_one.size(), 2u);
    ASSERT_EQ(e_sh.size(), 2u);
    EXPECT_EQ(e_sh[0]["error"], e_one[0]["error"]);
    EXPECT_EQ(e_sh[1]["response"]["body"], e_one[1]["response"]["body"]);
    EXPECT_EQ(e_sh[1]["response"]["status_code"], 400);
    // the status: the whole job's counts, usage and errors (with their input line numbers)
    const json st = json::parse(read(sh / "merged.status.json")), st1 = json::parse(read(one / "out.status.json"));
    EXPECT_EQ(st["status"], "completed");
    EXPECT_EQ(st["merged_shards"], 3);
    EXPECT_EQ(st["request_counts"], st1["request_counts"]);
    EXPECT_EQ(st["usage"], st1["usage"]);
    EXPECT_EQ(st["errors"], st1["errors"]);
    EXPECT_EQ(st["input_xxh3"], st1["input_xxh3"]);
    EXPECT_EQ(st["endpoint"], st1["endpoint"]);
}

TEST(BatchShard, MergeRefusesWhatIsNotOneInputsShards) {
    Loaded m;
    const fs::path d = test::scratch_dir("shard_bad_merge");
    write_lines(d / "in.jsonl", shard_input());
    const auto outs = run_shards(m, d, 3);
    ASSERT_EQ(merge_error(d, outs), "");
    const auto status = [&](int i) { return fs::path(api::with_suffix(outs[size_t(i)], ".status.json")); };
    const auto has = [](const std::string& what, const std::string& want) {
        return what.find(want) != std::string::npos;
    };
    EXPECT_PRED2(has, merge_error(d, {outs[0], outs[2]}), "shard(s) 1 of 3 missing (2 given)");
    EXPECT_PRED2(has, merge_error(d, {outs[0], outs[1], outs[1]}), "shard 1/3 is given twice");
    EXPECT_PRED2(has, merge_error(d, {}), "no shard outputs given");

    // a status copied away and edited: another count, another input, unfinished, not a shard's
    const fs::path keep = d / "keep.json";
    fs::copy_file(status(1), keep);
    const auto restore = [&] { fs::copy_file(keep, status(1), fs::copy_options::overwrite_existing); };
    edit_json(status(1), [](json& j) { j["shard"]["count"] = 4; });
    EXPECT_PRED2(has, merge_error(d, outs), "shard 1/4, but");
    EXPECT_PRED2(has, merge_error(d, outs), "shards of different splits");
    restore();
    edit_json(status(1), [](json& j) { j["input_xxh3"] = "0123456789abcdef"; });
    EXPECT_PRED2(has, merge_error(d, outs), "shard 1/3 ran on another input (input_xxh3 0123456789abcdef");
    restore();
    edit_json(status(1), [](json& j) { j["status"] = "in_progress"; });
    EXPECT_PRED2(has, merge_error(d, outs), "shard 1/3 is in_progress, not completed");
    restore();
    edit_json(status(1), [](json& j) { j.erase("shard"); });
    EXPECT_PRED2(has, merge_error(d, outs), "no shard field");
    restore();
    edit_json(status(1), [](json& j) { j["shard"]["index"] = 5; });
    EXPECT_PRED2(has, merge_error(d, outs), "shard.index: 5 is out of range for 3 shards");
    restore();
    edit_json(status(1), [](json& j) { j["request_counts"]["total"] = "many"; });
    EXPECT_PRED2(has, merge_error(d, outs), "request_counts.total: must be an integer >= 0");
    restore();
    ASSERT_EQ(merge_error(d, outs), "");

    // an answer in the wrong shard's file, one missing, one the input does not have
    const std::string out1 = read(outs[1]);
    {
        std::ofstream f(outs[1], std::ios::binary | std::ios::app);
        f << read_lines(outs[0])[0].dump() << "\n";
    }
    EXPECT_PRED2(has, merge_error(d, outs), "belongs to shard 0/3, not 1/3");
    std::ofstream(outs[1], std::ios::binary) << out1.substr(out1.find('\n') + 1);
    const std::string missing = json::parse(out1.substr(0, out1.find('\n')))["custom_id"].get<std::string>();
    EXPECT_PRED2(has, merge_error(d, outs), "custom_id '" + missing + "' has no result in shard 1/3");
    std::ofstream(outs[1], std::ios::binary) << out1 << out1.substr(0, out1.find('\n') + 1);
    EXPECT_PRED2(has, merge_error(d, outs), "a result for a custom_id that");
    std::ofstream(outs[1], std::ios::binary) << out1 << out1.substr(0, 20);
    EXPECT_PRED2(has, merge_error(d, outs), "cut off (no newline)");
    std::ofstream(outs[1], std::ios::binary) << out1;
    // a different input file
    write_lines(d / "in.jsonl", mixed_input());
    EXPECT_PRED2(has, merge_error(d, outs), "ran on another input");
    EXPECT_FALSE(fs::exists(d / "merged.jsonl.tmp"));
}

TEST(BatchShard, ShardResumesFromItsOwnOutput) {
    Loaded m;
    const fs::path d = test::scratch_dir("shard_resume"), ref = test::scratch_dir("shard_resume_ref");
    write_lines(d / "in.jsonl", shard_input());
    write_lines(ref / "in.jsonl", shard_input());
    api::BatchOptions o;
    o.shard = {1, 3};
    run(m, ref, 2, o);
    const auto want = bodies(ref / "out.jsonl");
    // interrupted after two answers (a cut-off third line), then the same command again
    const auto ref_lines = read_lines(ref / "out.jsonl");
    ASSERT_GE(ref_lines.size(), 3u);
    std::ofstream(d / "out.jsonl", std::ios::binary) << ref_lines[0].dump() << "\n"
                                                     << ref_lines[1].dump() << "\n"
                                                     << ref_lines[2].dump().substr(0, 30);
    std::atomic<bool> cancel{true};
    o.cancel = &cancel;
    EXPECT_EQ(run(m, d, 2, o).status, "cancelled");
    o.cancel = nullptr;
    const auto s = run(m, d, 2, o);
    EXPECT_EQ(s.status, "completed");
    EXPECT_EQ(s.skipped, 2);
    EXPECT_EQ(s.completed + s.skipped, int64_t(want.size()));
    EXPECT_EQ(bodies(d / "out.jsonl"), want);
    EXPECT_EQ(json::parse(read(d / "out.status.json"))["request_counts"]["completed"], int64_t(want.size()));
    // the same output under another spec (or none) is refused unless restarted
    for (const api::ShardSpec other : {api::ShardSpec{2, 3}, api::ShardSpec{1, 4}, api::ShardSpec{}}) {
        o.shard = other;
        try {
            run(m, d, 2, o);
            ADD_FAILURE() << other.index << "/" << other.count;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("holds the results of shard 1/3"), std::string::npos) << e.what();
        }
    }
    o.resume = false;
    EXPECT_EQ(run(m, d, 2, o).status, "completed");
}

namespace {
// An input stream that makes its lines as they are read and counts the bytes handed out.
class GeneratedLines : public std::streambuf {
public:
    explicit GeneratedLines(int64_t lines) : lines_(lines) {}
    int64_t bytes_read = 0;

protected:
    int_type underflow() override {
        if (next_ >= lines_) return traits_type::eof();
        line_ = completion_line("g" + std::to_string(next_), "Item " + std::to_string(next_), 1).dump() + "\n";
        ++next_;
        bytes_read += int64_t(line_.size());
        setg(line_.data(), line_.data(), line_.data() + line_.size());
        return traits_type::to_int_type(line_[0]);
    }

private:
    int64_t lines_, next_ = 0;
    std::string line_;
};
}  // namespace

// The run pass parses a line when the runner asks for it: after the first line it has read one line, not the file.
TEST(BatchShard, SecondPassReadsTheInputAsItGoes) {
    Loaded m;
    EngineOptions eo;
    Engine engine(*m.model, eo);
    const api::ModelContext ctx = api::make_model_context(engine, *m.tok, &m.tmpl, "synth", 16);
    GeneratedLines gen(20000);
    std::istream in(&gen);
    const api::BatchValidation v = api::validate_batch_input(in, ctx, {2, 5});
    EXPECT_EQ(v.valid, 20000);
    EXPECT_TRUE(v.errors.empty());
    EXPECT_NEAR(double(v.valid_in_shard), 4000, 300);

    GeneratedLines gen2(20000);
    std::istream in2(&gen2);
    api::BatchLineSource src(in2, ctx, {}, {});
    api::BatchLine l;
    ASSERT_TRUE(src.next(l));
    EXPECT_EQ(l.custom_id, "g0");
    EXPECT_LT(gen2.bytes_read, 1000);
    for (int i = 1; i < 100; ++i) ASSERT_TRUE(src.next(l));
    EXPECT_EQ(l.custom_id, "g99");
    EXPECT_LT(gen2.bytes_read, 101 * 200);
}
