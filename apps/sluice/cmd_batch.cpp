// sluice batch -m DIR -i requests.jsonl -o results.jsonl [--parallel N] [--continue-on-invalid] [--shard I/N]
// sluice batch --merge -i requests.jsonl -o results.jsonl SHARD_OUTPUT...
// Runs an OpenAI Batch input file (api/batch_job): results.jsonl gets the successes, results.errors.jsonl the
// failures, results.status.json a Batch-shaped status. Rerunning the same command resumes an interrupted job.
// --shard I/N runs one machine's share; --merge joins the N shards' files (api/batch_shard, docs/batch-shards.md).
// Exit status: 0 when every valid line ran (failed lines are in the error file), 1 when validation failed, 130 when
// interrupted (SIGINT/SIGTERM: requests in flight are cancelled, the rest is left for a resume).
#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "api/batch_job.h"
#include "api/batch_shard.h"
#include "commands.h"
#include "common.h"
#include "core/error.h"
#include "models/model.h"
#include "runtime/engine.h"

namespace sluice::cli {

namespace {
std::atomic<bool> g_cancel{false};
extern "C" void on_signal(int) { g_cancel.store(true); }

void merge(const api::BatchOptions& b, const std::vector<std::string>& shard_outputs) {
    api::MergeOptions mo;
    mo.input_path = b.input_path;
    mo.output_path = b.output_path;
    mo.error_path = b.error_path;
    mo.status_path = b.status_path;
    mo.shard_outputs = shard_outputs;
    const api::MergeSummary s = api::merge_batch_shards(mo);
    std::fprintf(stderr, "batch: merged %lld shards: %lld completed, %lld failed, in input order into %s\n",
                 (long long)s.shards, (long long)s.completed, (long long)s.failed, b.output_path.c_str());
}
}  // namespace

void register_batch(CLI::App& app) {
    struct Args {
        ModelArgs m;
        EngineArgs e;
        api::BatchOptions b;
        int64_t batch_rows = 512;
        bool restart = false;
        std::string shard;
        bool merge = false;
        std::vector<std::string> shard_outputs;
    };
    auto a = std::make_shared<Args>();
    auto* sub = app.add_subcommand("batch", "Run an OpenAI Batch JSONL file (chat or text completions) overnight");
    add_model_args(sub, a->m);
    sub->get_option("--model")->required(false);  // --merge loads no model; checked in the callback
    add_engine_args(sub, a->e);
    sub->add_option("-i,--input", a->b.input_path, "input JSONL: {custom_id, method, url, body} per line")->required();
    sub->add_option("-o,--output", a->b.output_path, "results JSONL (appended as requests finish)")->required();
    sub->add_option("--errors", a->b.error_path, "failed requests JSONL (default: OUTPUT.errors.jsonl)");
    sub->add_option("--status", a->b.status_path, "Batch-shaped status JSON (default: OUTPUT.status.json)");
    sub->add_flag("--continue-on-invalid", a->b.continue_on_invalid,
                  "write invalid input lines to the error file and run the rest (default: report them all and stop)");
    sub->add_flag("--restart", a->restart, "start over: truncate OUTPUT and the error file instead of resuming");
    sub->add_option("--max-tokens", a->b.default_max_tokens, "completion tokens when a request sets no max_tokens")
        ->check(positive())
        ->capture_default_str();
    sub->add_option("--batch-rows", a->batch_rows, "token rows per forward pass (prefill chunks + decode rows)")
        ->check(positive())
        ->capture_default_str();
    sub->add_option("--alias", a->b.model_id, "model name written into responses (default: the folder's name)");
    sub->add_option("--shard", a->shard,
                    "run only this machine's share I/N of the input (custom_id hash mod N == I; 0 <= I < N)");
    sub->add_flag("--merge", a->merge,
                  "join shards: the positional arguments are the N shards' OUTPUT files (their .errors.jsonl and "
                  ".status.json beside them); writes OUTPUT, its error and status file in input order; no model");
    sub->add_option("shard_outputs", a->shard_outputs, "with --merge: each shard's OUTPUT file");
    sub->add_option("--progress-interval", a->b.progress_interval_s, "seconds between progress lines (0: none)")
        ->check(non_negative())
        ->capture_default_str();
    sub->callback([a] {
        namespace fs = std::filesystem;
        if (a->merge) {
            SLUICE_CHECK(a->m.model.empty() && a->shard.empty(), "batch --merge: takes no --model or --shard (it "
                                                                 "joins finished shards' files)");
            merge(a->b, a->shard_outputs);
            return;
        }
        SLUICE_CHECK(a->shard_outputs.empty(), "batch: '", a->shard_outputs[0],
                     "': shard outputs are for --merge only");
        SLUICE_CHECK(!a->m.model.empty(), "--model is required");
        if (!a->shard.empty()) a->b.shard = api::parse_shard_spec(a->shard);
        check_model_folder(a->m.model);
        SLUICE_CHECK(fs::exists(a->b.input_path), a->b.input_path, ": no such file");
        // without a chat template, chat lines fail validation with a message that says so
        TextSide text = load_text_side(a->m.model, "batch");
        if (a->b.model_id.empty()) a->b.model_id = model_id_from_folder(a->m.model);
        const auto [model, draft, dspark, eagle3, eo] = load_serving_model(a->m, a->e, a->batch_rows);
        a->b.speculative_tokens = a->e.speculative;
        if (draft) a->b.make_drafter = [d = draft.get()] { return d->drafter(); };
        a->b.draft_gate = a->e.draft_gate == "on";
        if (draft) a->b.draft_bytes_per_token = pass_bytes_per_token(draft->model(), *model);
        if (dspark) a->b.make_drafter = [d = dspark.get()] { return d->drafter(); };
        if (eagle3) a->b.make_drafter = [d = eagle3.get()] { return d->drafter(); };
        Engine engine(*model, eo);
        a->b.resume = !a->restart;
        a->b.cancel = &g_cancel;
        std::signal(SIGINT, on_signal);
        std::signal(SIGTERM, on_signal);
        const api::BatchSummary s = api::run_batch(engine, *text.tokenizer, text.chat_template.get(), a->b);
        if (s.status == "failed") {
            const size_t shown = std::min<size_t>(s.validation_errors.size(), 20);
            for (size_t i = 0; i < shown; ++i)
                std::fprintf(stderr, "%s: %s\n", a->b.input_path.c_str(), s.validation_errors[i].c_str());
            if (shown < s.validation_errors.size())
                std::fprintf(stderr, "... and %zu more (all are in the status file)\n",
                             s.validation_errors.size() - shown);
            fail(a->b.input_path, ": ", s.validation_errors.size(),
                 " invalid line(s); nothing ran (--continue-on-invalid runs the valid ones)");
        }
        if (a->m.stats) {
            print_stats(*model, s.elapsed_s * 1000, s.input_tokens + s.output_tokens, stderr);
            const EngineStats es = engine.stats();
            if (a->e.speculative > 0)
                std::fprintf(stderr, "speculative (%s): %lld drafted, %lld accepted, %lld decode passes, %lld "
                             "draft-model passes, %lld request steps gated off\n",
                             draft    ? "draft_model"
                             : dspark ? "dspark"
                             : eagle3 ? "eagle3"
                                      : "prompt_lookup",
                             (long long)es.drafted,
                             (long long)es.accepted, (long long)es.decode_steps,
                             (long long)(draft ? draft->stats().forward_passes : 0), (long long)es.gate_off_steps);
        }
        if (s.status == "cancelled") {
            std::fprintf(stderr, "batch: interrupted; run the same command again to resume\n");
            std::exit(130);
        }
    });
}

}  // namespace sluice::cli
