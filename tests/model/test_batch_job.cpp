// The OpenAI Batch runner (api/batch_job) on a small synthesized model: results identical to each request run
// alone and whatever the number of sequences at once, validation errors with line numbers, invalid lines to the
// error file, resuming after an interruption (a cut-off last line included), and refusing to overwrite the input.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "api/batch_job.h"
#include "core/error.h"
#include "models/model.h"
#include "models/synth.h"
#include "runtime/engine.h"
#include "runtime/generate.h"
#include "../support/batch_fixture.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

using namespace sluice;
using nlohmann::json;
namespace fs = std::filesystem;

using namespace sluice::test::batch;

TEST(BatchJob, ResultsDoNotDependOnParallelSequences) {
    Loaded m;
    const fs::path a = test::scratch_dir("batch_par1"), b = test::scratch_dir("batch_par4");
    write_lines(a / "in.jsonl", mixed_input());
    write_lines(b / "in.jsonl", mixed_input());
    const auto s1 = run(m, a, 1);
    const auto s4 = run(m, b, 4);
    EXPECT_EQ(s1.status, "completed");
    EXPECT_EQ(s4.status, "completed");
    EXPECT_EQ(s4.total, 6);
    EXPECT_EQ(s4.completed, 6);
    EXPECT_EQ(s4.failed, 0);
    const auto r1 = bodies(a / "out.jsonl"), r4 = bodies(b / "out.jsonl");
    ASSERT_EQ(r4.size(), 6u);
    EXPECT_EQ(r1, r4);
    // the output lines have the OpenAI shape, the status file too
    for (const auto& l : read_lines(b / "out.jsonl")) {
        EXPECT_EQ(l["response"]["status_code"], 200);
        EXPECT_TRUE(l["error"].is_null());
        EXPECT_EQ(l["id"].get<std::string>().rfind("batch_req_", 0), 0u);
    }
    EXPECT_EQ(r4.at("p3")["choices"].size(), 2u);
    EXPECT_FALSE(r4.at("c3")["choices"][0]["logprobs"].is_null());
    const json st = json::parse(read(b / "out.status.json"));
    EXPECT_EQ(st["status"], "completed");
    EXPECT_EQ(st["request_counts"]["completed"], 6);
    EXPECT_EQ(st["usage"]["output_tokens"], s4.output_tokens);
    EXPECT_TRUE(fs::exists(b / "out.errors.jsonl"));
    EXPECT_EQ(read(b / "out.errors.jsonl"), "");
}

TEST(BatchJob, CompletionTextEqualsGenerateAlone) {
    Loaded m;
    const fs::path d = test::scratch_dir("batch_vs_generate");
    write_lines(d / "in.jsonl", mixed_input());
    run(m, d, 3);
    const auto r = bodies(d / "out.jsonl");
    GenerateOptions g;
    g.max_new_tokens = 12;
    const auto ids = m.tok->encode("Once upon a time", true);
    const GenerateResult ref = generate(*m.model, ids, g);
    EXPECT_EQ(r.at("p1")["choices"][0]["text"], m.tok->decode(ref.ids, true));
    EXPECT_EQ(r.at("p1")["usage"]["completion_tokens"], int64_t(ref.ids.size()));
    EXPECT_EQ(r.at("p1")["choices"][0]["finish_reason"], ref.stop_reason == "eos" ? "stop" : "length");
}

TEST(BatchJob, ValidationReportsEveryBadLineAndRunsNothing) {
    Loaded m;
    const fs::path d = test::scratch_dir("batch_invalid");
    write_lines(d / "in.jsonl", {chat_line("a", "hi", 3).dump(), "{not json", "",
                                 chat_line("a", "again", 3).dump(),
                                 json{{"custom_id", "u"}, {"method", "POST"}, {"url", "/v1/embeddings"},
                                      {"body", json::object()}}.dump(),
                                 chat_line("t", "hot", 3, {{"temperature", 7}}).dump(),
                                 completion_line("ok", "fine", 3).dump()});
    const auto s = run(m, d, 2);
    EXPECT_EQ(s.status, "failed");
    ASSERT_EQ(s.validation_errors.size(), 4u);
    EXPECT_EQ(s.validation_errors[0].rfind("line 2:", 0), 0u) << s.validation_errors[0];
    EXPECT_EQ(s.validation_errors[1].rfind("line 4:", 0), 0u) << s.validation_errors[1];
    EXPECT_NE(s.validation_errors[1].find("used twice"), std::string::npos);
    EXPECT_EQ(s.validation_errors[2].rfind("line 5:", 0), 0u) << s.validation_errors[2];
    EXPECT_EQ(s.validation_errors[3].rfind("line 6:", 0), 0u) << s.validation_errors[3];
    EXPECT_NE(s.validation_errors[3].find("temperature"), std::string::npos);
    EXPECT_FALSE(fs::exists(d / "out.jsonl") && !read(d / "out.jsonl").empty());
    const json st = json::parse(read(d / "out.status.json"));
    EXPECT_EQ(st["status"], "failed");
    ASSERT_EQ(st["errors"]["data"].size(), 4u);
    EXPECT_EQ(st["errors"]["data"][3]["line"], 6);

    api::BatchOptions o;
    o.continue_on_invalid = true;
    const auto s2 = run(m, d, 2, o);
    EXPECT_EQ(s2.status, "completed");
    EXPECT_EQ(s2.completed, 2);  // a, ok
    EXPECT_EQ(s2.failed, 4);
    const auto errs = read_lines(d / "out.errors.jsonl");
    ASSERT_EQ(errs.size(), 4u);
    const auto by = by_id(read_lines(d / "out.jsonl"));
    EXPECT_EQ(by.size(), 2u);
    EXPECT_TRUE(by.count("a") && by.count("ok"));
    int with_status = 0;
    for (const auto& e : errs)
        if (!e["response"].is_null()) {
            EXPECT_EQ(e["response"]["status_code"], 400);
            EXPECT_TRUE(e["response"]["body"]["error"]["message"].is_string());
            ++with_status;
        }
    EXPECT_EQ(with_status, 3);  // the line that is not JSON has no custom_id, so no response: error only
}

TEST(BatchJob, ResumeSkipsDoneLinesAndDropsACutOffLine) {
    Loaded m;
    const fs::path d = test::scratch_dir("batch_resume"), ref = test::scratch_dir("batch_resume_ref");
    write_lines(d / "in.jsonl", mixed_input());
    write_lines(ref / "in.jsonl", mixed_input());
    run(m, ref, 2);
    const auto want = bodies(ref / "out.jsonl");
    // an earlier run finished c1 and p1, then died while writing c2's line
    const auto ref_lines = by_id(read_lines(ref / "out.jsonl"));
    {
        std::ofstream f(d / "out.jsonl", std::ios::binary);
        f << ref_lines.at("c1").dump() << "\n" << ref_lines.at("p1").dump() << "\n";
        f << ref_lines.at("c2").dump().substr(0, 40);
    }
    const auto s = run(m, d, 2);
    EXPECT_EQ(s.status, "completed");
    EXPECT_EQ(s.skipped, 2);
    EXPECT_EQ(s.completed, 4);
    const auto lines = read_lines(d / "out.jsonl");  // parses: the cut-off line is gone
    EXPECT_EQ(lines.size(), 6u);
    EXPECT_EQ(bodies(d / "out.jsonl"), want);
    // the status counts the whole job, the earlier run's lines and usage included
    const json st = json::parse(read(d / "out.status.json")), st_ref = json::parse(read(ref / "out.status.json"));
    EXPECT_EQ(st["request_counts"]["completed"], 6);
    EXPECT_EQ(st["request_counts"]["total"], 6);
    EXPECT_EQ(st["usage"], st_ref["usage"]);

    // --restart semantics: resume off runs everything again
    api::BatchOptions o;
    o.resume = false;
    const auto s2 = run(m, d, 2, o);
    EXPECT_EQ(s2.skipped, 0);
    EXPECT_EQ(s2.completed, 6);
    EXPECT_EQ(read_lines(d / "out.jsonl").size(), 6u);
}

TEST(BatchJob, CancelStopsAndLeavesTheRestForAResume) {
    Loaded m;
    const fs::path d = test::scratch_dir("batch_cancel");
    write_lines(d / "in.jsonl", mixed_input());
    std::atomic<bool> cancel{true};
    api::BatchOptions o;
    o.cancel = &cancel;
    const auto s = run(m, d, 2, o);
    EXPECT_EQ(s.status, "cancelled");
    EXPECT_LT(s.completed, 6);
    cancel = false;
    const auto s2 = run(m, d, 2, o);
    EXPECT_EQ(s2.status, "completed");
    EXPECT_EQ(s2.completed + s2.skipped, 6);
    EXPECT_EQ(read_lines(d / "out.jsonl").size(), 6u);
    EXPECT_EQ(json::parse(read(d / "out.status.json"))["request_counts"]["completed"], 6);
}

TEST(BatchJob, WholeJobErrors) {
    Loaded m;
    const fs::path d = test::scratch_dir("batch_errors");
    write_lines(d / "in.jsonl", mixed_input());
    api::BatchOptions o;
    o.output_path = (d / "in.jsonl").string();
    EXPECT_THROW(run(m, d, 1, o), Error);
    o.output_path = (d / "out.jsonl").string();
    o.input_path = (d / "missing.jsonl").string();
    EXPECT_THROW(run(m, d, 1, o), Error);
    // a results file that is not ours is not silently overwritten or appended to
    write_lines(d / "out.jsonl", {"[1, 2, 3]"});
    o.input_path = (d / "in.jsonl").string();
    EXPECT_THROW(run(m, d, 1, o), Error);
}

TEST(BatchJob, ByteOrderMarkCrlfAndChangedInputOnResume) {
    Loaded m;
    const fs::path d = test::scratch_dir("batch_bom");
    {
        std::ofstream f(d / "in.jsonl", std::ios::binary);
        f << "\xEF\xBB\xBF" << completion_line("a", "one", 3).dump() << "\r\n"
          << completion_line("b", "two", 3).dump();  // no newline at the end
    }
    const auto s = run(m, d, 2);
    EXPECT_EQ(s.status, "completed");
    EXPECT_EQ(s.completed, 2);
    EXPECT_TRUE(s.validation_errors.empty());
    const json st = json::parse(read(d / "out.status.json"));
    ASSERT_TRUE(st["input_xxh3"].is_string());

    // the same input again: no warning; a changed one: a warning, and the answered ids are still skipped
    testing::internal::CaptureStderr();
    run(m, d, 2);
    EXPECT_EQ(testing::internal::GetCapturedStderr().find("changed since"), std::string::npos);
    {
        std::ofstream f(d / "in.jsonl", std::ios::binary | std::ios::app);
        f << "\n" << completion_line("c", "three", 3).dump() << "\n";
    }
    testing::internal::CaptureStderr();
    const auto s2 = run(m, d, 2);
    EXPECT_NE(testing::internal::GetCapturedStderr().find("changed since"), std::string::npos);
    EXPECT_EQ(s2.skipped, 2);
    EXPECT_EQ(s2.completed, 1);
    EXPECT_NE(json::parse(read(d / "out.status.json"))["input_xxh3"], st["input_xxh3"]);
}

// The status file is refreshed while the job runs, and the last write is the final state: a job that ran longer
// than one refresh interval once ended "in_progress" (the closing progress line rewrote it).
TEST(BatchJob, StatusRefreshedDuringTheRunEndsCompleted) {
    Loaded m;
    const fs::path d = test::scratch_dir("batch_status_refresh");
    write_lines(d / "in.jsonl", mixed_input());
    api::BatchOptions o;
    o.status_interval_s = 0;  // every engine step
    EXPECT_EQ(run(m, d, 2, o).status, "completed");
    const json st = json::parse(read(d / "out.status.json"));
    EXPECT_EQ(st["status"], "completed");
    EXPECT_TRUE(st.contains("in_progress_at"));
    EXPECT_TRUE(st.contains("completed_at"));
    EXPECT_EQ(st["request_counts"]["completed"], 6);
}
