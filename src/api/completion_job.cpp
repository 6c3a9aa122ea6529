#include "api/completion_job.h"

#include <algorithm>
#include <ctime>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace sluice::api {

struct CompletionJob::Shared {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<ChoiceDelta> queue;
    std::vector<ChoiceText> texts;       // one per choice; touched only by the engine thread's callbacks
    std::vector<int64_t> generated;      // tokens per choice
    std::vector<int64_t> cached;         // prompt tokens per choice taken from the prefix cache
    std::vector<uint8_t> ended;          // 1 once the choice's last delta is queued
    int64_t n_prompt = 0;
    bool cancelled = false;

    void push(ChoiceDelta d) {
        std::lock_guard lk(mu);
        if (!d.finish_reason.empty() || !d.error.empty()) ended[size_t(d.index)] = 1;
        queue.push_back(std::move(d));
        cv.notify_all();
    }
};

namespace {

int64_t now_unix_s() { return int64_t(std::time(nullptr)); }

// The callback of one choice: decode on the engine thread, queue the delta, stop the engine at a stop sequence.
TokenCallback choice_callback(std::shared_ptr<CompletionJob::Shared> sh, const tok::Tokenizer& tok, int index,
                              bool logprobs, int top_n) {
    return [sh = std::move(sh), &tok, index, logprobs, top_n](const TokenEvent& ev) {
        {
            std::lock_guard lk(sh->mu);
            if (sh->cancelled) return false;
        }
        ChoiceDelta d;
        d.index = index;
        ChoiceText& text = sh->texts[size_t(index)];
        d.text_offset = text.offset();
        sh->cached[size_t(index)] = ev.n_cached;
        if (ev.id >= 0) {
            sh->generated[size_t(index)] = ev.n_generated;
            d.text = text.push(ev.id);
            if (logprobs) d.logprobs.push_back(chat_logprob_entry(tok, ev.id, ev.logits, top_n));
        }
        if (text.stopped()) {
            d.finish_reason = "stop";
        } else if (ev.finish == FinishReason::stop || ev.finish == FinishReason::length) {
            d.text += text.finish();
            d.finish_reason = to_string(ev.finish);
        } else if (ev.finish == FinishReason::error) {
            d.error = ev.error.empty() ? "the engine failed" : ev.error;
        } else if (ev.finish == FinishReason::cancelled) {
            d.error = "cancelled";
        }
        const bool end = !d.finish_reason.empty() || !d.error.empty();
        sh->push(std::move(d));
        return !end;
    };
}

}  // namespace

CompletionJob::CompletionJob(Engine& engine, const tok::Tokenizer& tok, ParsedRequest req)
    : engine_(engine), req_(std::move(req)), id_(new_completion_id(req_.endpoint)), created_(now_unix_s()),
      shared_(std::make_shared<Shared>()) {
    SLUICE_CHECK(req_.n >= 1, "n must be >= 1");
    shared_->n_prompt = int64_t(req_.params.prompt.size());
    shared_->generated.assign(size_t(req_.n), 0);
    shared_->cached.assign(size_t(req_.n), 0);
    shared_->ended.assign(size_t(req_.n), 0);
    for (int i = 0; i < req_.n; ++i) shared_->texts.emplace_back(tok, req_.stop);
    try {
        for (int i = 0; i < req_.n; ++i) {
            RequestParams p = req_.params;
            p.sampling.seed += uint64_t(i);
            engine_ids_.push_back(
                engine_.submit(std::move(p), choice_callback(shared_, tok, i, req_.logprobs, req_.top_logprobs)));
        }
    } catch (...) {
        cancel();
        throw;
    }
}

CompletionJob::~CompletionJob() { cancel(); }

void CompletionJob::cancel() {
    {
        std::lock_guard lk(shared_->mu);
        if (shared_->cancelled) return;
        bool all_ended = true;
        for (auto e : shared_->ended) all_ended = all_ended && e;
        if (all_ended) return;
        shared_->cancelled = true;
    }
    for (uint64_t id : engine_ids_) engine_.cancel(id);
}

bool CompletionJob::wait(std::vector<ChoiceDelta>& out, std::chrono::milliseconds timeout) {
    std::unique_lock lk(shared_->mu);
    if (!shared_->cv.wait_for(lk, timeout, [&] { return !shared_->queue.empty(); })) return false;
    while (!shared_->queue.empty()) {
        ChoiceDelta d = std::move(shared_->queue.front());
        shared_->queue.pop_front();
        // merge with this choice's pending delta (one delta per choice and call keeps chunks few)
        ChoiceDelta* same = nullptr;
        for (auto& o : out)
            if (o.index == d.index && o.finish_reason.empty() && o.error.empty()) same = &o;
        if (!same) {
            out.push_back(std::move(d));
            continue;
        }
        same->text += d.text;
        for (auto& e : d.logprobs) same->logprobs.push_back(std::move(e));
        same->finish_reason = d.finish_reason;
        same->error = d.error;
    }
    return true;
}

bool CompletionJob::finished() const {
    std::lock_guard lk(shared_->mu);
    for (auto e : shared_->ended)
        if (!e) return false;
    return true;
}

ModelContext make_model_context(Engine& engine, const tok::Tokenizer& tok, const ChatTemplate* chat_template,
                                std::string model_id, int64_t default_max_tokens) {
    const ModelInfo& info = engine.model().info();
    ModelContext ctx;
    ctx.model_id = std::move(model_id);
    ctx.tokenizer = &tok;
    ctx.chat_template = chat_template;
    ctx.vocab_size = info.vocab_size;
    ctx.max_context_tokens = engine.options().max_context_tokens;
    if (info.max_position_embeddings > 0)
        ctx.max_context_tokens = std::min(ctx.max_context_tokens, info.max_position_embeddings);
    ctx.default_max_tokens = default_max_tokens;
    return ctx;
}

bool CompletionJob::done() const {
    std::lock_guard lk(shared_->mu);
    if (!shared_->queue.empty()) return false;
    for (auto e : shared_->ended)
        if (!e) return false;
    return true;
}

Usage CompletionJob::usage() const {
    std::lock_guard lk(shared_->mu);
    Usage u;
    u.prompt_tokens = shared_->n_prompt;
    u.cached_tokens = shared_->cached.empty() ? 0 : shared_->cached[0];  // n > 1: the first choice's
    for (int64_t g : shared_->generated) u.completion_tokens += g;
    return u;
}

nlohmann::json CompletionJob::wait_result(std::chrono::steady_clock::time_point deadline,
                                          const std::function<std::optional<ApiError>()>& abort) {
    std::vector<ChoiceResult> choices(size_t(req_.n));
    std::vector<nlohmann::json> entries(size_t(req_.n), nlohmann::json::array());
    while (!done()) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            cancel();
            throw ApiError(504, "timeout_error", "the request did not finish within the server's timeout");
        }
        if (abort)
            if (std::optional<ApiError> why = abort()) {
                cancel();
                throw *why;
            }
        std::vector<ChoiceDelta> ds;
        if (!wait(ds, std::min(left, std::chrono::milliseconds(kAbortPollMs)))) continue;
        for (auto& d : ds) {
            if (!d.error.empty()) {
                cancel();
                throw ApiError(500, "server_error", "generation failed: " + d.error);
            }
            auto& c = choices[size_t(d.index)];
            c.text += d.text;
            for (auto& e : d.logprobs) entries[size_t(d.index)].push_back(std::move(e));
            if (!d.finish_reason.empty()) c.finish_reason = d.finish_reason;
        }
    }
    if (req_.logprobs)
        for (size_t i = 0; i < choices.size(); ++i)
            choices[i].logprobs = logprobs_object(req_, entries[i], req_.echo ? req_.prompt_text.size() : 0);
    return completion_json(req_, id_, created_, choices, usage());
}

}  // namespace sluice::api
