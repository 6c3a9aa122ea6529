// sluice generate -m DIR (--ids 5,17,3 | -p TEXT) -n N [--temp T] [--seed S] [--json]
// Without --json, generated text (or ids) streams to stdout and stats go to stderr; with --json the last line of
// stdout is one JSON object with ids, text (when the folder has a tokenizer) and timings.
#include <cstdio>
#include <memory>

#include "commands.h"
#include "common.h"
#include "core/error.h"
#include "models/model.h"
#include "runtime/generate.h"

namespace sluice::cli {

void register_generate(CLI::App& app) {
    struct Args {
        ModelArgs m;
        std::string ids, prompt;
        int64_t n = 16, chunk = 512;
        float temp = 0.0f, top_p = 1.0f, min_p = 0.0f;
        int64_t top_k = 0;
        uint64_t seed = 0;
        bool json = false, ignore_eos = false;
    };
    auto a = std::make_shared<Args>();
    auto* sub = app.add_subcommand("generate", "Generate tokens from a prompt");
    add_model_args(sub, a->m);
    auto* ids = sub->add_option("--ids", a->ids, "prompt as comma-separated token ids");
    auto* prompt = sub->add_option("-p,--prompt", a->prompt, "prompt text (needs a tokenizer in the model folder)");
    ids->excludes(prompt);
    sub->add_option("-n,--n-predict", a->n, "tokens to generate")->check(CLI::NonNegativeNumber);
    sub->add_option("--temp", a->temp, "sampling temperature (0 = greedy)")->check(CLI::NonNegativeNumber);
    sub->add_option("--top-k", a->top_k, "keep the k most likely tokens (0 = off)");
    sub->add_option("--top-p", a->top_p, "nucleus sampling mass (1 = off)");
    sub->add_option("--min-p", a->min_p, "drop tokens below min-p x the top probability (0 = off)");
    sub->add_option("-s,--seed", a->seed, "random seed");
    sub->add_option("--chunk", a->chunk, "prompt rows per forward pass")->check(CLI::PositiveNumber);
    sub->add_flag("--ignore-eos", a->ignore_eos, "keep generating past end-of-sequence tokens");
    sub->add_flag("--json", a->json, "print one JSON object as the last line of stdout");
    sub->callback([a] {
        std::vector<int32_t> prompt_ids;
        if (!a->ids.empty())
            prompt_ids = parse_ids(a->ids);
        else if (!a->prompt.empty())
            fail("generate: -p needs a tokenizer, which this build cannot load yet; use --ids");
        else
            fail("generate: give a prompt with --ids or -p");
        auto model = load_model(a->m.model, a->m.to_options());
        GenerateOptions opt;
        opt.max_new_tokens = a->n;
        opt.prefill_chunk = a->chunk;
        opt.stop_at_eos = !a->ignore_eos;
        opt.sampling = {.temperature = a->temp, .top_k = a->top_k, .top_p = a->top_p, .min_p = a->min_p, .seed = a->seed};
        auto on_token = [&](int32_t id) {
            if (!a->json) {
                std::printf("%d ", id);
                std::fflush(stdout);
            }
            return true;
        };
        GenerateResult r = generate(*model, prompt_ids, opt, on_token);
        const double prefill_tps = r.prefill_ms > 0 ? 1000.0 * double(r.n_prompt) / r.prefill_ms : 0;
        const int64_t steps = int64_t(r.ids.size()) - 1;
        const double decode_tps = steps > 0 && r.decode_ms > 0 ? 1000.0 * double(steps) / r.decode_ms : 0;
        if (a->json) {
            std::string ids_json;
            for (size_t i = 0; i < r.ids.size(); ++i) ids_json += (i ? "," : "") + std::to_string(r.ids[i]);
            std::printf(
                "{\"ids\":[%s],\"n_prompt\":%lld,\"n_generated\":%zu,\"stop_reason\":\"%s\",\"prefill_ms\":%.3f,"
                "\"decode_ms\":%.3f,\"prefill_tok_per_s\":%.3f,\"decode_tok_per_s\":%.3f}\n",
                ids_json.c_str(), (long long)r.n_prompt, r.ids.size(), r.stop_reason.c_str(), r.prefill_ms,
                r.decode_ms, prefill_tps, decode_tps);
        } else {
            std::printf("\n");
            std::fprintf(stderr, "prompt: %lld tokens in %.1f ms (%.2f tok/s); generated %zu tokens, decode %.2f tok/s (%s)\n",
                         (long long)r.n_prompt, r.prefill_ms, prefill_tps, r.ids.size(), decode_tps, r.stop_reason.c_str());
        }
    });
}

}  // namespace sluice::cli
