#include "runtime/generate.h"

#include <algorithm>
#include <chrono>

#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "state/state_file.h"
#include "runtime/engine.h"

namespace sluice {

namespace {

using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

// Runs one request alone on an engine sized for it; on_event sees every event. Returns the engine's counts. With a
// session file, the engine's prefix cache starts with the file's state and the request's final state is saved.
EngineStats run_alone(Model& model, RequestParams p, int64_t chunk, const TokenCallback& on_event,
                      const std::string& session = {}) {
    SLUICE_CHECK(!p.prompt.empty(), "the prompt is empty");
    SLUICE_CHECK(chunk > 0, "prefill chunk must be > 0");
    EngineOptions eo;
    eo.max_batch_rows = chunk;
    eo.max_sequences = 1;
    eo.max_context_tokens = std::max<int64_t>(2, int64_t(p.prompt.size()) + std::max<int64_t>(p.max_new_tokens, 1));
    if (!session.empty()) eo.prefix_cache_bytes = ~uint64_t(0) >> 2;  // one state: the request's own, shared pages
    Engine engine(model, eo);
    const StateFileModel fm = model.info().state_file_model();
    if (!session.empty() && std::filesystem::exists(session)) {
        auto saved = model.new_sequence();
        try {
            load_state(session, fm, *saved);
            engine.prefix_cache()->insert(std::move(saved));
        } catch (const Error& e) {
            log_info("sluice: warning: session ", e.what(), "; computing the prompt from scratch");
        }
    }
    std::vector<int32_t> tokens = p.prompt;
    std::string error;
    engine.submit(std::move(p), [&](const TokenEvent& ev) {
        if (ev.finish == FinishReason::error) error = ev.error;
        if (ev.id >= 0) tokens.push_back(ev.id);
        return on_event(ev);
    });
    engine.run_until_idle();
    SLUICE_CHECK(error.empty(), error);
    if (!session.empty())
        if (auto st = engine.prefix_cache()->lookup(tokens, int64_t(tokens.size())))
            save_state(*st, fm, session);
    return engine.stats();
}

GenerateResult generate_with(Model& model, std::span<const int32_t> prompt, const GenerateOptions& opt,
                             RequestParams p, const std::function<bool(int32_t)>& on_token, EngineStats* stats) {
    p.prompt.assign(prompt.begin(), prompt.end());
    p.max_new_tokens = opt.max_new_tokens;
    p.stop_at_eos = opt.stop_at_eos;
    p.sampling = opt.sampling;
    GenerateResult r;
    r.n_prompt = int64_t(prompt.size());
    r.stop_reason = "length";
    const auto t0 = Clock::now();
    auto t_first = t0;
    const EngineStats es = run_alone(model, std::move(p), opt.prefill_chunk, [&](const TokenEvent& ev) {
        r.n_cached = ev.n_cached;
        if (ev.id < 0) return true;
        if (r.ids.empty()) t_first = Clock::now();
        r.ids.push_back(ev.id);
        if (on_token && !on_token(ev.id)) {
            r.stop_reason = "callback";
            return false;
        }
        if (ev.finish == FinishReason::stop) r.stop_reason = "eos";
        return true;
    }, opt.session_file);
    if (stats) *stats = es;
    const auto t1 = Clock::now();
    if (r.ids.empty()) t_first = t1;
    r.prefill_ms = ms_between(t0, t_first);
    r.decode_ms = ms_between(t_first, t1);
    return r;
}

}  // namespace

bool is_eos(const ModelInfo& info, int32_t id) {
    return std::find(info.eos_token_ids.begin(), info.eos_token_ids.end(), id) != info.eos_token_ids.end();
}

std::vector<float> prompt_logits(Model& model, std::span<const int32_t> prompt, int64_t chunk) {
    const size_t V = size_t(model.info().vocab_size);
    std::vector<float> all(prompt.size() * V);
    RequestParams p;
    p.prompt.assign(prompt.begin(), prompt.end());
    p.max_new_tokens = 0;
    p.prompt_logits = true;
    p.stop_at_eos = false;
    run_alone(model, std::move(p), chunk, [&](const TokenEvent& ev) {
        if (ev.prompt_position >= 0) std::copy(ev.logits.begin(), ev.logits.end(), all.begin() + ev.prompt_position * V);
        return true;
    });
    return all;
}

GenerateResult generate(Model& model, std::span<const int32_t> prompt, const GenerateOptions& opt,
                        const std::function<bool(int32_t)>& on_token) {
    return generate_with(model, prompt, opt, {}, on_token, nullptr);
}

GenerateResult generate_speculative(Model& model, std::span<const int32_t> prompt, const GenerateOptions& opt,
                                    const SpeculativeOptions& spec, SpeculativeStats* stats,
                                    const std::function<bool(int32_t)>& on_token) {
    SLUICE_CHECK(spec.draft_tokens >= 1 && spec.ngram_min >= 1 && spec.ngram_max >= spec.ngram_min,
                 "speculative options: draft_tokens >= 1 and 1 <= ngram_min <= ngram_max");
    RequestParams p{.draft_tokens = spec.draft_tokens, .ngram_min = spec.ngram_min, .ngram_max = spec.ngram_max,
                    .drafter = spec.drafter, .draft_gate = spec.gate,
                    .draft_bytes_per_token = spec.draft_bytes_per_token, .sample_drafts = spec.sample_drafts};
    EngineStats es;
    GenerateResult r = generate_with(model, prompt, opt, std::move(p), on_token, &es);
    if (stats) {
        stats->forward_passes = es.decode_steps;
        stats->drafted = es.drafted;
        stats->accepted = es.accepted;
        stats->gate_off_steps = es.gate_off_steps;
    }
    return r;
}

}  // namespace sluice
