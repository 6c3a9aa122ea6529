// The CLI forms other tools depend on: `logits` writes a standard .npy, `generate --json` ends stdout with one
// JSON object, `inspect --json` reports the model's figures.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <tuple>
#include <nlohmann/json.hpp>

#include "../support/scratch_dir.h"
#include "../support/st_builder.h"
#include "core/npy.h"
#include "ops/cuda/backend.h"
#include "../support/test_util.h"

using namespace sluice;

namespace {
const std::string kFixture = std::string(SLUICE_TEST_DATA_DIR) + "/fixtures/dsv3_qlora_group_yarn";

// stdout only, or with with_stderr stdout and stderr together.
std::string run(const std::string& args, int* status = nullptr, bool with_stderr = false) {
    return test::run_command(std::string(SLUICE_BINARY) + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null"), status);
}

nlohmann::json ref() {
    std::ifstream f(kFixture + "/ref.json");
    return nlohmann::json::parse(f);
}

std::string join(const std::vector<int>& ids) {
    std::string s;
    for (size_t i = 0; i < ids.size(); ++i) {
        if (i) s += ',';
        s += std::to_string(ids[i]);
    }
    return s;
}
}  // namespace

TEST(Cli, LogitsWritesNpy) {
    auto r = ref();
    auto ids = r["ids"].get<std::vector<int>>();
    const std::string out = test::temp_dir("cli_logits") + "/out.npy";
    int status = -1;
    run("logits -m " + kFixture + " --ids " + join(ids) + " -o " + out + " -t 1", &status);
    ASSERT_EQ(status, 0);
    auto got = npy_read(out);
    auto want = npy_read(kFixture + "/ref_logits.npy");
    EXPECT_EQ(got.descr, "<f4");
    EXPECT_EQ(got.shape, want.shape);
    auto g = got.as_f32(), w = want.as_f32();
    double num = 0, den = 0;
    for (size_t i = 0; i < w.size(); ++i) {
        num = std::max(num, std::fabs(double(g[i]) - w[i]));
        den = std::max(den, std::fabs(double(w[i])));
    }
    EXPECT_LE(num / den, 1e-4);
}

TEST(Cli, GenerateJsonLastLine) {
    auto r = ref();
    auto ids = r["ids"].get<std::vector<int>>();
    auto greedy = r["greedy"].get<std::vector<int>>();
    int status = -1;
    std::string out = run("generate -m " + kFixture + " --ids " + join(ids) + " -n " + std::to_string(greedy.size()) +
                              " --ignore-eos --json",
                          &status);
    ASSERT_EQ(status, 0);
    auto last =
        out.substr(out.rfind('\n', out.size() - 2) == std::string::npos ? 0 : out.rfind('\n', out.size() - 2) + 1);
    auto j = nlohmann::json::parse(last);
    EXPECT_EQ(j["ids"].get<std::vector<int>>(), greedy);
    EXPECT_TRUE(j.contains("decode_tok_per_s"));
    EXPECT_TRUE(j.contains("prefill_ms"));
}

TEST(Cli, SeededSamplingIsReproducible) {
    const std::string args =
        "generate -m " + kFixture + " --ids 1,2,3 -n 8 --temp 0.9 --top-k 20 --seed 7 --ignore-eos --json";
    auto ids = [](const std::string& out) { return nlohmann::json::parse(out)["ids"].get<std::vector<int>>(); };
    EXPECT_EQ(ids(run(args)), ids(run(args)));
    EXPECT_NE(ids(run(args)), ids(run("generate -m " + kFixture +
                                      " --ids 1,2,3 -n 8 --temp 0.9 --top-k 20 --seed 8 --ignore-eos --json")));
}

// `sluice tokenize` prints ids as a JSON array; --ids takes that form as well as 5,17,3.
TEST(Cli, IdsTakeTheJsonArrayTokenizePrints) {
    const std::string tail = " -n 4 --ignore-eos --json";
    auto ids = [](const std::string& out) { return nlohmann::json::parse(out)["ids"].get<std::vector<int>>(); };
    const auto plain = ids(run("generate -m " + kFixture + " --ids 1,2,3" + tail));
    EXPECT_EQ(ids(run("generate -m " + kFixture + " --ids '[1, 2, 3]'" + tail)), plain);
    EXPECT_EQ(ids(run("generate -m " + kFixture + " --ids ' [1,2,3]\n'" + tail)), plain);
}

// Bad options fail before any model loads, in one line naming the option and the value, with a non-zero status
// (2 for a bad command line, 1 for a value the engine rejects).
TEST(Cli, BadOptionsGetOnePlainError) {
    const std::string gen = "generate -m " + kFixture + " --ids 1,2 ";
    const std::string batch = "batch -m " + kFixture + " -i " + kFixture + "/config.json -o x.jsonl ";
    const std::vector<std::pair<std::string, std::string>> cases = {
        {gen + "-n -3", "--n-predict: must be >= 0, got -3"},
        {gen + "-n abc", "--n-predict: 'abc' is not a number"},
        {gen + "--temp nan", "--temp: must be >= 0, got nan"},
        {gen + "--top-k -1", "--top-k: must be >= 0, got -1"},
        {gen + "--top-p 1.5", "top-p must be in (0, 1], got 1.5"},
        {gen + "--min-p 2", "min-p must be in [0, 1], got 2"},
        {gen + "--ctx 0", "--ctx: must be > 0, got 0"},
        {gen + "-t -5", "--threads: must be >= 0, got -5"},
        {gen + "--bogus-flag 3", "--bogus-flag"},
        {"generate --ids 1", "--model is required"},
        {"demo -n -1", "--n-predict: must be >= 0, got -1"},
        {"inspect -m " + kFixture + " --drive-gbps -1", "--drive-gbps: must be >= 0, got -1"},
        {"bench -m " + kFixture + " --raw-seconds -1", "--raw-seconds: must be > 0, got -1"},
        {"bench-io --file " + kFixture + "/config.json --seconds 0", "--seconds: must be > 0, got 0"},
        {"pack " + kFixture + " unused-dir --qd 0", "--qd: must be > 0, got 0"},
        {"generate -m " + kFixture + " --ids '[1,2' -n 1", "--ids: '[' without a closing ']'"},
        {"generate -m " + kFixture + " --ids 1,x -n 1", "--ids: item 1 ('x') is not an integer"},
        {gen + "-n 4 --speculative 2 --draft-sampling off", "--draft-sampling off needs a drafting model"},
        {gen + "--device tpu", "--device"},
        {gen + "--device cpu --gpu-memory 1G", "--gpu-memory needs --device cuda or auto"},
        {"serve -m " + kFixture, "serve needs tokenizer.json or tiktoken.model in the model folder"},
        {"serve -m " + kFixture + " --port 70000", "--port"},
        {"serve -m " + kFixture + " --parallel 0", "--parallel: must be > 0, got 0"},
        {"serve -m " + kFixture + " --api-key-file /nonexistent/keys", "/nonexistent/keys: cannot read the API key"},
        {"serve -m " + kFixture + " --cors-origin http://a.example/path",
         "--cors-origin: must be * or scheme://host[:port] with no path, got 'http://a.example/path'"},
        {"serve -m " + kFixture + " --cors-origin ftp://a.example", "--cors-origin: must be * or scheme://host[:port]"},
        {"serve -m /nonexistent/model", "/nonexistent/model"},
        {"batch -m " + kFixture + " -o out.jsonl", "--input is required"},
        {"batch -m " + kFixture + " -i /nonexistent/in.jsonl -o out.jsonl", "/nonexistent/in.jsonl: no such file"},
        {"batch -m " + kFixture + " -i " + kFixture + "/config.json -o x.jsonl", "batch needs tokenizer.json"},
        {batch + "--shard 3/2", "--shard '3/2': shard index 3 is out of range for 2 shards (0 to 1)"},
        {batch + "--shard 0/0", "--shard '0/0': the number of shards must be at least 1"},
        {batch + "--shard=-1/2", "--shard '-1/2': the shard index must be 0 or more"},
        {batch + "--shard junk", "--shard 'junk': not I/N"},
        {batch + "stray.jsonl", "'stray.jsonl': shard outputs are for --merge only"},
        {"batch -i " + kFixture + "/config.json -o x.jsonl", "--model is required"},
        {"batch --merge -i " + kFixture + "/config.json -o x.jsonl", "batch --merge: no shard outputs given"},
        {"batch --merge -i " + kFixture + "/config.json -o x.jsonl /nonexistent/s0/results.jsonl",
         "/nonexistent/s0/results.status.json: no such file"},
        {"batch --merge " + batch.substr(6) + "s.jsonl", "batch --merge: takes no --model or --shard"},
    };
    for (const auto& [args, want] : cases) {
        int status = 0;
        const std::string out = run(args, &status, true);
        EXPECT_NE(status, 0) << args;
        EXPECT_NE(out.find("sluice: error: "), std::string::npos) << args << "\n" << out;
        EXPECT_EQ(out.find('\n'), out.size() - 1) << "one line: " << args << "\n" << out;
        EXPECT_NE(out.find(want), std::string::npos) << args << "\n" << out;
        EXPECT_EQ(out.find("17976931"), std::string::npos) << args << "\n" << out;  // no 300-digit range limits
    }
}

// --device cuda: where no CUDA device is usable (CI), one plain error that says why; where one is, the same greedy
// tokens as the CPU (f32-level matmuls on both; the fixture's logits are far apart at the top).
TEST(Cli, DeviceCudaRunsOrSaysWhyNot) {
    const std::string gen = "generate -m " + kFixture + " --ids 1,2,3 -n 6 --json ";
    int status = 0;
    const std::string cpu = run(gen + "--device cpu", &status);
    ASSERT_EQ(status, 0) << cpu;
    std::string why;
    const std::string cuda = run(gen + "--device cuda", &status, !sluice::cuda::usable(&why));
    if (!sluice::cuda::usable()) {
        EXPECT_EQ(status, 1) << cuda;
        EXPECT_NE(cuda.find("sluice: error: --device cuda: "), std::string::npos) << cuda;
        EXPECT_NE(cuda.find(why), std::string::npos) << cuda;
        EXPECT_EQ(cuda.find('\n'), cuda.size() - 1) << cuda;
        return;
    }
    ASSERT_EQ(status, 0) << cuda;
    const auto ids = [](const std::string& out) {
        return nlohmann::json::parse(out.substr(out.rfind('\n', out.size() - 2) + 1))["ids"];
    };
    EXPECT_EQ(ids(cpu), ids(cuda));
}

TEST(Cli, InspectJson) {
    int status = -1;
    auto j = nlohmann::json::parse(run("inspect -m " + kFixture + " --json", &status));
    ASSERT_EQ(status, 0);
    EXPECT_EQ(j["architecture"], "DeepseekV3ForCausalLM");
    EXPECT_EQ(j["n_routed_experts"], 16);
    EXPECT_EQ(j["num_experts_per_tok"], 4);
    EXPECT_EQ(j["n_moe_layers"], 2);
    // one expert: gate + up [32, 64] and down [64, 32] in f32
    EXPECT_EQ(j["expert_bytes"], 3 * 32 * 64 * 4);
    EXPECT_EQ(j["expert_bytes_read_per_token"], 3 * 32 * 64 * 4 * 4 * 2);
    EXPECT_LT(j["params_active"].get<uint64_t>(), j["params_total"].get<uint64_t>());
}

// --usage-stats: the first run writes the file, the second pins from it; a garbage file is ignored with a
// warning (exit 0). The generated ids never change.
TEST(Cli, UsageStatsFileRoundTrip) {
    auto r = ref();
    const std::string stats = test::temp_dir("cli_usage") + "/usage.json";
    std::remove(stats.c_str());
    const std::string args = "generate -m " + kFixture + " --ids " + join(r["ids"].get<std::vector<int>>()) +
                             " -n 6 --ignore-eos --json --memory 96M --usage-stats " + stats;
    auto ids = [](const std::string& out) {
        return nlohmann::json::parse(out.substr(out.rfind('{')))["ids"].get<std::vector<int>>();
    };
    int status = -1;
    const auto first = ids(run(args, &status));
    ASSERT_EQ(status, 0);
    std::ifstream f(stats);
    ASSERT_TRUE(f.good()) << "no usage statistics file written";
    nlohmann::json parsed;
    EXPECT_NO_THROW(parsed = nlohmann::json::parse(f));
    EXPECT_TRUE(parsed.is_object()) << parsed.dump();
    EXPECT_EQ(ids(run(args, &status)), first);
    EXPECT_EQ(status, 0);
    std::ofstream(stats) << "{ not json";
    EXPECT_EQ(ids(run(args, &status)), first);
    EXPECT_EQ(status, 0);
}

// generate --session: a second turn computes only its new tokens and gives exactly what the whole conversation
// computed from scratch gives, on a model with per-token caches and on Kimi Linear (recurrent state); a damaged
// state file is only a warning and the same output.
TEST(Cli, GenerateSessionContinuesExactly) {
    const auto last_json = [](const std::string& out) {
        const size_t nl = out.rfind('\n', out.size() - 2);
        return nlohmann::json::parse(out.substr(nl == std::string::npos ? 0 : nl + 1));
    };
    for (const std::string fixture : {"dsv3_qlora_group_yarn", "kimi_linear_noqlora"}) {
        const std::string model = std::string(SLUICE_TEST_DATA_DIR) + "/fixtures/" + fixture;
        static const std::filesystem::path dir = sluice::test::scratch_dir("cli_session");
        const std::string session = (dir / ("sluice-session-" + fixture)).string();
        std::remove(session.c_str());
        std::remove((session + ".json").c_str());
        int status = -1;
        auto first = last_json(run("generate -m " + model + " --ids 5,17,3,9 -n 6 --ignore-eos --json --session " +
                                       session, &status));
        ASSERT_EQ(status, 0) << fixture;
        EXPECT_EQ(first["n_cached"], 0);
        for (int damaged = 0; damaged < 2; ++damaged) {
            if (damaged) {
                std::fstream f(session, std::ios::in | std::ios::out | std::ios::binary);
                f.seekp(40);
                f.put('\x7f');
            }
            // the sidecar is the conversation; the next turn's ids follow it
            std::ifstream sf(session + ".json");
            const auto all = nlohmann::json::parse(sf)["tokens"].get<std::vector<int>>();
            std::vector<int> whole = all;
            for (int t : {11, 4, 2}) whole.push_back(t);
            const auto fresh = last_json(run("generate -m " + model + " --ids " + join(whole) + " -n 5 --ignore-eos --json"));
            const std::string saved_state = session + ".copy";
            std::filesystem::copy_file(session, saved_state, std::filesystem::copy_options::overwrite_existing);
            std::filesystem::copy_file(session + ".json", saved_state + ".json",
                                       std::filesystem::copy_options::overwrite_existing);
            std::string out = run("generate -m " + model + " --ids 11,4,2 -n 5 --ignore-eos --json --session " +
                                      saved_state, &status, true);
            ASSERT_EQ(status, 0) << out;
            const auto next = last_json(out);
            EXPECT_EQ(next["ids"], fresh["ids"]) << fixture << " damaged " << damaged;
            EXPECT_EQ(next["n_prompt"].get<int>(), int(whole.size()));
            if (damaged) {
                EXPECT_EQ(next["n_cached"], 0) << out;
                EXPECT_NE(out.find("warning: session"), std::string::npos) << out;
            } else {
                EXPECT_EQ(next["n_cached"].get<int>(), int(all.size()) - 1) << fixture;  // all but the last id fed
            }
        }
    }
}

// `sluice plan`: a projection on a fixture, its JSON, and its errors: bad figures are one line naming the flag with
// status 1, a bad command line status 2, and a budget below the working set names the minimum instead of projecting.
TEST(Cli, PlanProjectsAndRefusesImpossibleFigures) {
    int status = -1;
    const std::string plan = "plan -m " + kFixture + " ";
    const std::string out = run(plan + "--memory 200M --drives 7GB/s,7GB/s --json", &status);
    ASSERT_EQ(status, 0) << out;
    const auto j = nlohmann::json::parse(out);
    EXPECT_DOUBLE_EQ(j["drive_gbps"].get<double>(), 14.0);
    EXPECT_EQ(j["memory_plan"]["budget_bytes"].get<uint64_t>(), uint64_t(200) << 20);
    EXPECT_FALSE(j["timed"].get<bool>());  // no --rates: bytes and the drive-bound ceiling only
    EXPECT_DOUBLE_EQ(j["hit_rate"].get<double>(), 1.0);  // this fixture's experts all fit in 200M
    EXPECT_DOUBLE_EQ(j["decode"]["bytes_read_per_token"].get<double>(), 0.0);
    // at the minimum budget nothing is cached: a token reads top_k experts of every MoE layer
    const uint64_t min = j["memory_plan"]["min_bytes"].get<uint64_t>();
    const auto at_min = nlohmann::json::parse(run(plan + "--memory " + std::to_string(min) + " --drives 7GB/s --json", &status));
    ASSERT_EQ(status, 0);
    const auto& m = at_min["model"];
    EXPECT_DOUBLE_EQ(at_min["hit_rate"].get<double>(), 0.0);
    EXPECT_DOUBLE_EQ(at_min["decode"]["bytes_read_per_token"].get<double>(),
                     double(m["top_k"].get<int64_t>() * m["moe_layers"].get<int64_t>() * m["expert_slot_bytes"].get<int64_t>()));
    const std::string text = run(plan + "--memory 200M --drives 7GB/s --device cuda", &status, true);
    EXPECT_EQ(status, 0);
    EXPECT_NE(text.find("no CUDA kernel rates are measured yet"), std::string::npos) << text;
    // with a card: its copies and each pass's bytes to it
    const auto card = nlohmann::json::parse(
        run(plan + "--memory 200M --drives 7GB/s --device cuda --gpu-memory 1G --link 25GB/s --json", &status));
    ASSERT_EQ(status, 0);
    EXPECT_EQ(card["card"]["budget_bytes"].get<uint64_t>(), uint64_t(1) << 30);
    EXPECT_DOUBLE_EQ(card["card"]["link_gbps"].get<double>(), 25.0);
    EXPECT_TRUE(card["decode"].contains("link_bytes"));
    const std::string card_text =
        run(plan + "--memory 200M --drives 7GB/s --device cuda --gpu-memory 1G --link 25GB/s", &status, true);
    EXPECT_NE(card_text.find("to the card"), std::string::npos) << card_text;
    const std::string rates = test::temp_dir("cli_plan") + "/rates.json";
    {
        std::ofstream f(rates);
        f << R"({"sluice_rates": 1, "drive_gbps": 0, "kernels": {"bf16": {"rows": [1], "gbps": [1]}}})";
    }
    const std::vector<std::tuple<std::string, int, std::string>> cases = {
        {plan + "--memory 200M --drives 0GB/s", 1, "--drives: '0GB/s': a drive rate must be > 0"},
        {plan + "--memory 200M --drives=-7GB/s", 1, "--drives: '-7GB/s': a drive rate must be > 0"},
        {plan + "--memory 200M --drives 7XB/s", 1, "--drives: '7XB/s' has an unknown unit"},
        {plan + "--memory 200M --drives 7GB/s,", 1, "--drives: '' is not a rate"},
        {plan + "--memory 12Q --drives 7GB/s", 1, "--memory: size '12Q' has an unknown unit"},
        {plan + "--memory 0 --drives 7GB/s", 1, "--memory: the budget must be > 0"},
        {plan + "--memory 1M --drives 7GB/s", 1, "is below the minimum working set of"},
        {plan + "--memory 200M --drives 7GB/s --rates " + rates, 1, "drive_gbps must be a positive rate"},
        {plan + "--memory 200M --drives 7GB/s --batch-sizes 1,x", 1, "--batch-sizes: 'x' is not a positive integer"},
        {"plan --like kimi-k9 --memory 64G --drives 7GB/s", 1, "--like 'kimi-k9' is not a model plan knows"},
        {"plan --memory 64G --drives 7GB/s", 2, "give a model folder (-m DIR) or a published model (--like NAME)"},
        {plan + "--like kimi-k3 --memory 64G --drives 7GB/s", 2, "excludes"},
        {plan + "--drives 7GB/s", 2, "--memory is required"},
        {plan + "--memory 64G --drives 7GB/s --device tpu", 2, "--device"},
        {plan + "--memory 200M --drives 7GB/s --device cuda --gpu-memory 8G", 1, "--gpu-memory needs --link"},
        {plan + "--memory 200M --drives 7GB/s --device cuda --link 25GB/s", 1, "--link needs --gpu-memory"},
        {plan + "--memory 200M --drives 7GB/s --gpu-memory 8G --link 25GB/s", 1, "--gpu-memory needs --device cuda"},
        {plan + "--memory 200M --drives 7GB/s --device cuda --gpu-memory 8G --link 0GB/s", 1,
         "--link: '0GB/s': a rate must be > 0"},
        {plan + "--memory 200M --drives 7GB/s --device cuda --gpu-memory 8Q --link 25GB/s", 1,
         "--gpu-memory: size '8Q' has an unknown unit"},
    };
    for (const auto& [args, want_status, want] : cases) {
        const std::string err = run(args, &status, true);
        EXPECT_EQ(status, want_status) << args << "\n" << err;
        EXPECT_NE(err.find("sluice: error: "), std::string::npos) << args << "\n" << err;
        EXPECT_EQ(err.find('\n'), err.size() - 1) << "one line: " << args << "\n" << err;
        EXPECT_NE(err.find(want), std::string::npos) << args << "\n" << err;
    }
}

// bench --save-rates writes a rates file plan reads: then plan projects times (decode tok/s > 0, compute > 0).
TEST(Cli, BenchSavesRatesThatPlanUses) {
    const std::string tiny = std::string(SLUICE_TEST_DATA_DIR) + "/../../models/sluice-k2-tiny";
    const std::string rates = test::temp_dir("cli_bench_rates") + "/rates.json";
    int status = -1;
    const std::string err = run("bench -m " + tiny + " --memory 80M --ctx 256 --tokens 2 --prompt-tokens 2 "
                                "--raw-seconds 0.2 -t 1 --save-rates " + rates + " --rates-formats model "
                                "--trace-experts " + rates + ".trace",
                                &status, true);
    ASSERT_EQ(status, 0) << err;
    EXPECT_NE(err.find("need "), std::string::npos) << err;
    EXPECT_NE(err.find("at the f32 FMA peak ("), std::string::npos) << err;  // the compute side's limit
    std::ifstream f(rates);
    const auto r = nlohmann::json::parse(f);
    EXPECT_EQ(r["sluice_rates"].get<int>(), 1);
    EXPECT_EQ(r["threads"].get<int>(), 1);
    EXPECT_GT(r["drive_gbps"].get<double>(), 0);
    EXPECT_TRUE(r["kernels"].contains("bf16"));
    EXPECT_FALSE(r["kernels"].contains("mxfp4"));  // --rates-formats model: the tiny model is all BF16
    const auto p = nlohmann::json::parse(
        run("plan -m " + tiny + " --memory 80M --ctx 256 --drives 2GB/s --rates " + rates + " --json", &status));
    ASSERT_EQ(status, 0);
    EXPECT_TRUE(p["timed"].get<bool>());
    EXPECT_GT(p["decode"]["compute_ms"].get<double>(), 0);
    EXPECT_GT(p["decode"]["tok_per_s"].get<double>(), 0);
    // a K3 plan needs MXFP4 kernel rates, which this file does not have: one error naming the format
    const std::string e = run("plan --like kimi-k3 --memory 64G --drives 7GB/s --rates " + rates, &status, true);
    EXPECT_EQ(status, 1);
    EXPECT_NE(e.find("no kernel rate for mxfp4"), std::string::npos) << e;
    // the routing bench recorded, replayed through the cache at plan's size (the decode hit rate), any policy
    const std::string trace = rates + ".trace";
    for (const char* policy : {"lru", "next-use"}) {
        const auto t = nlohmann::json::parse(run("plan -m " + tiny + " --memory 80M --ctx 256 --drives 2GB/s --trace " +
                                                     trace + " --cache-policy " + policy + " --json",
                                                 &status));
        ASSERT_EQ(status, 0) << policy;
        EXPECT_NE(t["hit_model"].get<std::string>().find("recorded trace"), std::string::npos);
        EXPECT_EQ(t["cache_policy"].get<std::string>(), policy);
        EXPECT_GE(t["hit_rate"].get<double>(), 0.0);
    }
    // a trace of another model, or cut short: one line naming the file
    const std::string other = run("plan -m " + kFixture + " --memory 200M --drives 7GB/s --trace " + trace, &status, true);
    EXPECT_EQ(status, 1);
    EXPECT_NE(other.find(trace), std::string::npos) << other;
    EXPECT_EQ(other.find('\n'), other.size() - 1) << other;
    std::filesystem::resize_file(trace, std::filesystem::file_size(trace) - 5);
    const std::string cut = run("plan -m " + tiny + " --memory 80M --drives 7GB/s --trace " + trace, &status, true);
    EXPECT_EQ(status, 1);
    EXPECT_NE(cut.find("is truncated"), std::string::npos) << cut;
}

// A DSpark or EAGLE-3 drafter's weights, context caches and taps come out of --memory before the target's plan: --stats
// says how much, the target's plan gets the rest, and a budget too small for both says the drafter took its part.
TEST(Cli, HiddenStateDrafterIsInTheBudget) {
    const std::string dir = test::temp_dir("cli_drafter_budget");
    int status = -1;
    run("synth --like kimi-k3 --layers 5 --experts 4 --scale-down 32 --no-sync -o " + dir + "/k3", &status);
    ASSERT_EQ(status, 0);
    for (const std::string like : {"kimi-k3-dspark", "kimi-k3-eagle3"}) {
        const std::string drafter = dir + "/" + like;
        run("synth --like " + like + " --target " + dir + "/k3 --layers " + (like == "kimi-k3-dspark" ? "5" : "1") +
                " --scale-down 32 --no-sync -o " + drafter,
            &status);
        ASSERT_EQ(status, 0) << like;
        const std::string gen = "generate -m " + dir + "/k3 --ids 5,17,3,99 -n 4 --speculative 3 --draft-model " +
                                drafter + " --ctx 512 ";
        const std::string out = run(gen + "--memory 64M --stats", &status, true);
        ASSERT_EQ(status, 0) << out;
        // "memory budget        57.10 MiB" and "drafter DIR: 6.90 MiB (weights ...": together the 64 MiB given
        const auto mib_after = [&](const std::string& key) {
            const size_t at = out.find(key);
            EXPECT_NE(at, std::string::npos) << key << "\n" << out;
            return at == std::string::npos ? 0.0 : std::stod(out.substr(out.find_first_of("0123456789", at + key.size())));
        };
        const double budget = mib_after("memory budget"), reserved = mib_after("drafter " + drafter + ":");
        EXPECT_GT(reserved, 0.1) << out;  // the weights alone (files of 1.6-4 MB) and 512 + 3 cache rows
        EXPECT_NEAR(budget + reserved, 64.0, 0.02) << out;
        EXPECT_NE(out.find("reserved from --memory"), std::string::npos) << out;
        const std::string tight = run(gen + "--memory " + std::to_string(int(reserved * 1024) + 64) + "K", &status, true);
        EXPECT_EQ(status, 1);
        EXPECT_NE(tight.find("is reserved for the drafter " + drafter), std::string::npos) << tight;
        const std::string none = run(gen + "--memory " + std::to_string(int(reserved * 1024) - 16) + "K", &status, true);
        EXPECT_EQ(status, 1);
        EXPECT_NE(none.find("does not even hold the drafter " + drafter), std::string::npos) << none;
    }
}
