// sluice generate -m DIR (--ids 5,17,3 | -p TEXT [--chat]) -n N [--temp T] [--seed S] [--json]
//                 [--speculative N [--draft-model DIR [--draft-memory SIZE]]]
// Without --json, generated text (ids when the folder has no tokenizer) streams to stdout and stats go to stderr;
// with --json the last line of stdout is one JSON object with ids, text (when there is a tokenizer) and timings.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "common.h"
#include "core/error.h"
#include "models/model.h"
#include "runtime/draft_model.h"
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

namespace {

struct Session {
    std::vector<int32_t> tokens;                         // the conversation so far: every prompt and generated token
    nlohmann::json messages = nlohmann::json::array();  // --chat: the messages so far
};

std::string sidecar(const std::string& path) { return path + ".json"; }

// A missing sidecar is a new session; a damaged one is reported and ignored (a new session), never a failure.
Session read_session(const std::string& path) {
    Session s;
    std::ifstream f(sidecar(path));
    if (!f) return s;
    const nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
    const auto tokens = j.is_object() ? j.find("tokens") : j.end();
    bool ok = j.is_object() && tokens != j.end() && tokens->is_array();
    if (ok)
        for (const auto& t : *tokens) ok = ok && t.is_number_integer() && t.get<int64_t>() >= 0 &&
                                           t.get<int64_t>() <= INT32_MAX;
    if (!ok) {
        std::fprintf(stderr, "sluice: warning: %s is not a session file (no \"tokens\" array); starting a new one\n",
                     sidecar(path).c_str());
        return s;
    }
    for (const auto& t : *tokens) s.tokens.push_back(int32_t(t.get<int64_t>()));
    if (j.contains("messages") && j["messages"].is_array()) s.messages = j["messages"];
    return s;
}

void write_session(const std::string& path, const Session& s) {
    const std::string tmp = sidecar(path) + ".partial";
    {
        std::ofstream f(tmp, std::ios::trunc);
        f << nlohmann::json{{"tokens", s.tokens}, {"messages", s.messages}}.dump() << "\n";
        SLUICE_CHECK(f.good(), tmp, ": cannot write the session");
    }
    std::filesystem::rename(tmp, sidecar(path));
}

}  // namespace

void register_generate(CLI::App& app) {
    struct Args {
        ModelArgs m;
        std::string ids, prompt, draft_model, draft_memory, session, draft_gate = "on", draft_sampling = "on";
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
                    "verify up to N draft tokens per forward pass, from prompt lookup or --draft-model (greedy: the "
                    "same output; sampled: the same distribution, by rejection sampling; fewer passes when drafts "
                    "are right; 0 = off)")
        ->check(non_negative());
    sub->add_option("--draft-gate", a->draft_gate,
                    "on: verify only as many drafts (up to --speculative) as the acceptance so far and the bytes a "
                    "pass reads say pay, none while none do (probing again later), and a DSpark drafter's confidence "
                    "head cuts each block to the drafts that pay; off: always N")
        ->check(CLI::IsMember({"on", "off"}))
        ->capture_default_str();
    sub->add_option("--draft-model", a->draft_model,
                    "draft with this model (same tokenizer as -m, checked at load) instead of prompt lookup; needs "
                    "--speculative N. A Kimi K3 DSpark drafter folder (model_type k3_dspark) is detected: it drafts "
                    "blocks of up to 7 from the target's hidden states; so is an EAGLE-3 drafter (architectures "
                    "Eagle3DeepseekV2ForCausalLM): it drafts N tokens one at a time from them");
    sub->add_option("--draft-sampling", a->draft_sampling,
                    "with --temp > 0 and --draft-model: on, the drafting model draws each draft as this request "
                    "samples and it is accepted with probability min(1, p/q) (q the drafter's, p the target's); off, "
                    "it proposes its argmax, accepted with probability p. Both exact; prompt lookup always guesses")
        ->check(CLI::IsMember({"on", "off"}));
    sub->add_option("--draft-memory", a->draft_memory,
                    "the draft model's share of --memory (default: a quarter); the target gets the rest");
    sub->add_option("--session", a->session,
                    "continue the conversation saved in FILE and save it again: the new prompt (-p text, --ids, or "
                    "with --chat one more user message) follows what FILE holds, and only the new tokens are "
                    "computed (FILE keeps the state, FILE.json the tokens and chat messages)");
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
        SLUICE_CHECK(a->draft_sampling == "on" || (a->temp > 0.0f && !a->draft_model.empty()),
                     "--draft-sampling off needs a drafting model (--draft-model) and sampling (--temp > 0): "
                     "otherwise the drafts are guesses already");
        Sampler{sampling};  // checks the values now, not after loading the model
        std::unique_ptr<Tokenizer> tok;
        if (has_tokenizer(a->m.model)) tok = load_tokenizer(a->m.model);
        // --session: FILE.json holds the conversation's tokens (and chat messages); FILE the state, a cache of them
        Session session = a->session.empty() ? Session{} : read_session(a->session);
        std::vector<int32_t> prompt_ids = session.tokens;
        nlohmann::json messages = session.messages;
        if (!a->ids.empty()) {
            const auto more = parse_ids(a->ids);
            prompt_ids.insert(prompt_ids.end(), more.begin(), more.end());
        } else {
            SLUICE_CHECK(tok, a->m.model, ": -p needs tokenizer.json or tiktoken.model in the model folder");
            if (a->chat) {
                ChatRequest req;
                messages.push_back({{"role", "user"}, {"content", a->prompt}});
                req.messages = messages;
                req.add_generation_prompt = true;
                prompt_ids = tok->encode(ChatTemplate::from_model_dir(a->m.model).apply(req), false);
            } else {
                const auto more = tok->encode(a->prompt, session.tokens.empty());  // BOS only at the start
                prompt_ids.insert(prompt_ids.end(), more.begin(), more.end());
            }
        }
        const auto t0 = std::chrono::steady_clock::now();
        LoadOptions load = a->m.to_options();
        load.max_pass_rows = a->chunk;  // the engine's max_batch_rows (runtime/generate)
        // recurrent state snapshots within a pass (speculation; a session's prefix cache): reserved in the plan
        if (a->speculative > 0 || !a->session.empty()) load.snapshot_rows = std::max(a->chunk, a->speculative + 1);
        const DraftPlan draft_plan = plan_draft(load, a->draft_model, a->draft_memory, a->speculative);
        auto model = load_target(a->m.model, load, draft_plan);
        std::unique_ptr<DraftModel> draft = load_draft(draft_plan, *model, a->m.model, a->chunk);
        std::unique_ptr<DSparkDrafter> dspark = load_dspark(draft_plan, *model);
        if (dspark) dspark->set_confidence_cut(a->draft_gate == "on");  // the gate's per-block part
        std::unique_ptr<Eagle3Drafter> eagle3 = load_eagle3(draft_plan, *model);
        const char* drafter_name = draft ? "draft_model" : dspark ? "dspark" : eagle3 ? "eagle3" : "prompt_lookup";
        GenerateOptions opt;
        opt.max_new_tokens = a->n;
        opt.prefill_chunk = a->chunk;
        opt.stop_at_eos = !a->ignore_eos;
        opt.sampling = sampling;
        opt.session_file = a->session;
        std::unique_ptr<StreamDecoder> dec;
        if (tok) dec = std::make_unique<StreamDecoder>(*tok, true);
        std::string text;
        // expert bytes the target had read when the first token came (the prefill's), for bytes per decoded token
        const StreamingExpertSource* streaming = model->streaming();
        uint64_t bytes_at_first = 0;
        bool first = true;
        auto on_token = [&](int32_t id) {
            if (first && streaming) bytes_at_first = streaming->stats().bytes_read;
            first = false;
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
            so.gate = a->draft_gate == "on";
            so.sample_drafts = a->draft_sampling == "on";
            if (draft) so.draft_bytes_per_token = pass_bytes_per_token(draft->model(), *model);
            if (draft) so.drafter = draft->drafter();
            if (dspark) so.drafter = dspark->drafter();
            if (eagle3) so.drafter = eagle3->drafter();
            r = generate_speculative(*model, prompt_ids, opt, so, &spec_stats, on_token);
        } else {
            r = generate(*model, prompt_ids, opt, on_token);
        }
        if (dec) {
            std::string rest = dec->finish();
            text += rest;
            if (!a->json) std::fwrite(rest.data(), 1, rest.size(), stdout);
        }
        if (!a->session.empty()) {
            session.tokens = prompt_ids;
            session.tokens.insert(session.tokens.end(), r.ids.begin(), r.ids.end());
            if (a->chat) messages.push_back({{"role", "assistant"}, {"content", text}});
            session.messages = messages;
            write_session(a->session, session);
        }
        const double total_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        const double prefill_tps = r.prefill_ms > 0 ? 1000.0 * double(r.n_prompt) / r.prefill_ms : 0;
        const int64_t steps = int64_t(r.ids.size()) - 1;
        const double decode_tps = steps > 0 && r.decode_ms > 0 ? 1000.0 * double(steps) / r.decode_ms : 0;
        if (a->m.stats) print_stats(*model, r.prefill_ms + r.decode_ms, r.n_prompt + int64_t(r.ids.size()), stderr);
        if (a->m.stats && draft_plan.drafter_bytes > 0)
            std::fprintf(stderr, "drafter %s: %s (weights, context caches and taps)%s\n", draft_plan.dir.c_str(),
                         format_bytes(draft_plan.drafter_bytes).c_str(),
                         load.memory_budget_bytes > 0 ? ", reserved from --memory before the plan above" : "");
        const uint64_t decode_bytes = streaming ? streaming->stats().bytes_read - bytes_at_first : 0;
        // tokens per verify pass: the decode passes' tokens (kept drafts + one each); the first came from the prefill
        const double per_pass = spec_stats.forward_passes > 0 ? double(steps) / double(spec_stats.forward_passes) : 0;
        if (a->m.stats && a->speculative > 0)
            std::fprintf(stderr, "speculative (%s): %lld drafted, %lld accepted (%.1f%%), %.2f tokens per verify pass; "
                         "%lld passes drafted nothing (the gate)\n",
                         drafter_name, (long long)spec_stats.drafted,
                         (long long)spec_stats.accepted,
                         spec_stats.drafted > 0 ? 100.0 * double(spec_stats.accepted) / double(spec_stats.drafted) : 0.0,
                         per_pass, (long long)spec_stats.gate_off_steps);
        if (a->m.stats && draft) {
            const DraftModelStats& ds = draft->stats();
            std::fprintf(stderr, "draft model: %lld calls, %lld forward passes (%lld context tokens fed, %lld resets), "
                         "%.1f ms\n", (long long)ds.calls, (long long)ds.forward_passes, (long long)ds.fed_tokens,
                         (long long)ds.resets, ds.ms);
            print_stats(draft->model(), ds.ms, ds.fed_tokens + ds.drafted, stderr);
        }
        if (a->m.stats && dspark) {
            const DSparkStats& ds = dspark->stats();
            std::fprintf(stderr, "dspark: %lld calls, %lld block passes, %lld context rows ingested, %lld drafted, "
                         "%lld cut by the confidence head, %lld without target taps, %.1f ms\n", (long long)ds.calls,
                         (long long)ds.blocks, (long long)ds.ingested, (long long)ds.drafted, (long long)ds.cut,
                         (long long)ds.no_taps, ds.ms);
        }
        if (a->m.stats && eagle3) {
            const Eagle3Stats& es = eagle3->stats();
            std::fprintf(stderr, "eagle3: %lld calls, %lld draft chains, %lld context rows added, %lld drafted, "
                         "%lld without target taps, %.1f ms\n", (long long)es.calls, (long long)es.chains,
                         (long long)es.ingested, (long long)es.drafted, (long long)es.no_taps, es.ms);
        }
        if (a->json) {
            nlohmann::json j;
            j["ids"] = r.ids;
            if (tok) j["text"] = text;
            j["n_prompt"] = r.n_prompt;
            j["n_cached"] = r.n_cached;
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
                                    {"accepted", spec_stats.accepted},
                                    {"tokens_per_verify_pass", per_pass},
                                    {"gate_off_steps", spec_stats.gate_off_steps},
                                    {"gate", a->draft_gate},
                                    {"drafter", drafter_name}};
            // flat keys: clients find the object as the last '{' of stdout when not speculating
            if (draft) {
                j["draft_forward_passes"] = draft->stats().forward_passes;
                j["draft_ms"] = draft->stats().ms;
                if (const StreamingExpertSource* ds = draft->model().streaming())
                    j["draft_expert_bytes_read"] = ds->stats().bytes_read;
            }
            if (dspark) {
                j["draft_block_passes"] = dspark->stats().blocks;
                j["draft_confidence_cut"] = dspark->stats().cut;
                j["draft_ms"] = dspark->stats().ms;
            }
            if (eagle3) {
                j["draft_chains"] = eagle3->stats().chains;
                j["draft_ms"] = eagle3->stats().ms;
            }
            if (streaming) {
                j["expert_bytes_read"] = streaming->stats().bytes_read;
                j["decode_expert_bytes_per_token"] = steps > 0 ? double(decode_bytes) / double(steps) : 0.0;
            }
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
