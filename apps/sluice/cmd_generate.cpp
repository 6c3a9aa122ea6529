// sluice generate -m DIR (--ids 5,17,3 | -p TEXT [--chat]) -n N [--temp T] [--seed S] [--json]
// Without --json, generated text (ids when the folder has no tokenizer) streams to stdout and stats go to stderr;
// with --json the last line of stdout is one JSON object with ids, text (when there is a tokenizer) and timings.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "common.h"
#include "core/error.h"
#include "models/model.h"
#include "runtime/generate.h"
#include "runtime/sampler.h"
#include "runtime/speculative.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace sluice::cli {

using tok::StreamDecoder;
using tok::Tokenizer;
using tok::load_tokenizer;

namespace {
bool has_tokenizer(const std::string& dir) {
    namespace fs = std::filesystem;
    return fs::exists(fs::path(dir) / "tokenizer.json") || fs::exists(fs::path(dir) / "tiktoken.model");
}
}  // namespace

void register_generate(CLI::App& app) {
    struct Args {
        ModelArgs m;
        std::string ids, prompt;
        int64_t n = 16, chunk = 512;
        float temp = 0.0f, top_p = 1.0f, min_p = 0.0f;
        int64_t top_k = 0, speculative = 0;
        uint64_t seed = 0;
        bool json = false, ignore_eos = false, chat = false, dry_run = false;
    };
    auto a = std::make_shared<Args>();
    auto* sub = app.add_subcommand("generate", "Generate tokens from a prompt");
    add_model_args(sub, a->m);
    add_trace_arg(sub, a->m);
    auto* ids =
        sub->add_option("--ids", a->ids, "prompt as token ids: 5,17,3 or [5, 17, 3] (as sluice tokenize prints)");
    auto* prompt = sub->add_option("-p,--prompt", a->prompt, "prompt text (needs a tokenizer in the model folder)");
    ids->excludes(prompt);
    sub->add_flag("--chat", a->chat, "wrap -p as one user message with the model's chat template");
    sub->add_option("-n,--n-predict", a->n, "tokens to generate")->check(non_negative());
    sub->add_option("--temp,--temperature", a->temp, "sampling temperature (0 = greedy)")->check(non_negative());
    sub->add_option("--top-k", a->top_k, "keep the k most likely tokens (0 = off)")->check(non_negative());
    sub->add_option("--top-p", a->top_p, "nucleus sampling mass (1 = off)");
    sub->add_option("--min-p", a->min_p, "drop tokens below min-p x the top probability (0 = off)");
    sub->add_option("-s,--seed", a->seed, "random seed");
    sub->add_option("--chunk", a->chunk, "prompt rows per forward pass")->check(positive());
    sub->add_flag("--ignore-eos", a->ignore_eos, "keep generating past end-of-sequence tokens");
    sub->add_option("--speculative", a->speculative,
                    "verify up to N prompt-lookup draft tokens per forward pass (greedy only; same output, fewer "
                    "passes when the text repeats itself; 0 = off)")
        ->check(non_negative());
    sub->add_flag("--json", a->json, "print one JSON object as the last line of stdout");
    sub->add_flag("--dry-run", a->dry_run, "print the memory plan and what a token must read, then exit");
    sub->callback([a] {
        if (a->dry_run) {
            auto model = load_model(a->m.model, a->m.to_options());
            print_plan(*model, 0, stdout);
            return;
        }
        check_model_folder(a->m.model);  // before the tokenizer check, which would blame a missing tokenizer
        SLUICE_CHECK(!a->ids.empty() || !a->prompt.empty(), "generate: give a prompt with --ids or -p");
        const SamplingParams sampling{
            .temperature = a->temp, .top_k = a->top_k, .top_p = a->top_p, .min_p = a->min_p, .seed = a->seed};
        SLUICE_CHECK(a->speculative == 0 || a->temp == 0.0f,
                     "--speculative needs greedy decoding (--temp 0): drafts are checked against the argmax");
        Sampler{sampling};  // checks the values now, not after loading the model
        std::unique_ptr<Tokenizer> tok;
        if (has_tokenizer(a->m.model)) tok = load_tokenizer(a->m.model);
        std::vector<int32_t> prompt_ids;
        if (!a->ids.empty()) {
            prompt_ids = parse_ids(a->ids);
        } else {
            SLUICE_CHECK(tok, a->m.model, ": -p needs tokenizer.json or tiktoken.model in the model folder");
            if (a->chat) {
                ChatRequest req;
                req.messages.push_back({{"role", "user"}, {"content", a->prompt}});
                req.add_generation_prompt = true;
                prompt_ids = tok->encode(ChatTemplate::from_model_dir(a->m.model).apply(req), false);
            } else {
                prompt_ids = tok->encode(a->prompt, true);
            }
        }
        const auto t0 = std::chrono::steady_clock::now();
        auto model = load_model(a->m.model, a->m.to_options());
        GenerateOptions opt;
        opt.max_new_tokens = a->n;
        opt.prefill_chunk = a->chunk;
        opt.stop_at_eos = !a->ignore_eos;
        opt.sampling = sampling;
        std::unique_ptr<StreamDecoder> dec;
        if (tok) dec = std::make_unique<StreamDecoder>(*tok, true);
        std::string text;
        auto on_token = [&](int32_t id) {
            // ids past the tokenizer's vocabulary (padding rows of the embedding) decode to nothing, as in HF
            std::string piece = !dec ? std::to_string(id) + " " : id < tok->vocab_size() ? dec->push(id) : "";
            text += piece;
            if (!a->json) {
                std::fwrite(piece.data(), 1, piece.size(), stdout);
                std::fflush(stdout);
            }
            return true;
        };
        SpeculativeStats spec_stats;
        GenerateResult r;
        if (a->speculative > 0) {
            SpeculativeOptions so;
            so.draft_tokens = a->speculative;
            r = generate_speculative(*model, prompt_ids, opt, so, &spec_stats, on_token);
        } else {
            r = generate(*model, prompt_ids, opt, on_token);
        }
        if (dec) {
            std::string rest = dec->finish();
            text += rest;
            if (!a->json) std::fwrite(rest.data(), 1, rest.size(), stdout);
        }
        const double total_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        const double prefill_tps = r.prefill_ms > 0 ? 1000.0 * double(r.n_prompt) / r.prefill_ms : 0;
        const int64_t steps = int64_t(r.ids.size()) - 1;
        const double decode_tps = steps > 0 && r.decode_ms > 0 ? 1000.0 * double(steps) / r.decode_ms : 0;
        if (a->m.stats) print_stats(*model, r.prefill_ms + r.decode_ms, r.n_prompt + int64_t(r.ids.size()), stderr);
        if (a->json) {
            nlohmann::json j;
            j["ids"] = r.ids;
            if (tok) j["text"] = text;
            j["n_prompt"] = r.n_prompt;
            j["n_generated"] = r.ids.size();
            j["stop_reason"] = r.stop_reason;
            j["prefill_ms"] = r.prefill_ms;
            j["decode_ms"] = r.decode_ms;
            j["total_ms"] = total_ms;
            j["prefill_tok_per_s"] = prefill_tps;
            j["decode_tok_per_s"] = decode_tps;
            if (a->speculative > 0)
                j["speculative"] = {{"forward_passes", spec_stats.forward_passes},
                                    {"drafted", spec_stats.drafted},
                                    {"accepted", spec_stats.accepted}};
            std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
        } else {
            std::printf("\n");
            std::fprintf(stderr, "prompt: %lld tokens in %.1f ms (%.2f tok/s); generated %zu tokens, decode %.2f tok/s (%s)\n",
                         (long long)r.n_prompt, r.prefill_ms, prefill_tps, r.ids.size(), decode_tps, r.stop_reason.c_str());
            if (a->speculative > 0)
                std::fprintf(stderr, "speculative: %lld decode passes for %zu tokens; %lld of %lld drafts kept\n",
                             (long long)spec_stats.forward_passes, r.ids.size(), (long long)spec_stats.accepted,
                             (long long)spec_stats.drafted);
        }
    });
}

}  // namespace sluice::cli
