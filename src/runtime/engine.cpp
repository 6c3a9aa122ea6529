// Continuous batching (see engine.h): admission under the sequence and token limits, one flat Batch per step made
// of decode rows then prefill chunks, per-request sampling with penalties and bias, and request endings (stop,
// length, cancel, callback, forward errors). Tokens are bit-identical to generate() for the same request.
#include "runtime/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <unordered_map>

#include "core/error.h"

namespace sluice {

const char* to_string(FinishReason r) {
    switch (r) {
        case FinishReason::none:
            return "";
        case FinishReason::stop:
            return "stop";
        case FinishReason::length:
            return "length";
        case FinishReason::cancelled:
            return "cancelled";
        case FinishReason::error:
            return "error";
    }
    return "";
}

struct Engine::Request {
    uint64_t id = 0;
    RequestParams p;
    TokenCallback on_event;
    Sampler sampler;
    std::unique_ptr<SequenceState> seq;  // created at admission, freed as soon as the request ends
    int64_t n_prompt = 0, n_prefilled = 0, n_generated = 0;
    int64_t need_tokens = 0;                      // prompt + max_new_tokens
    int64_t reserved_tokens = 0;                  // need_tokens while running, else 0
    int32_t pending = -1;                         // the last sampled id, to be fed back as the next decode row
    std::unordered_map<int32_t, int64_t> counts;  // generated id -> count (only with penalties)
    bool adjusts = false;                         // any penalty or bias: sample from an adjusted copy
    bool done = false;

    Request(RequestParams params, TokenCallback cb)
        : p(std::move(params)), on_event(std::move(cb)), sampler(p.sampling), n_prompt(int64_t(p.prompt.size())) {
        adjusts = p.frequency_penalty != 0 || p.presence_penalty != 0 || !p.logit_bias.empty();
    }
};

Engine::Engine(Model& model, const EngineOptions& options) : model_(model), opt_(options) {
    SLUICE_CHECK(opt_.max_batch_rows >= 1, "EngineOptions::max_batch_rows must be >= 1, got ", opt_.max_batch_rows);
    SLUICE_CHECK(opt_.max_sequences >= 1, "EngineOptions::max_sequences must be >= 1, got ", opt_.max_sequences);
    SLUICE_CHECK(opt_.max_context_tokens >= 2, "EngineOptions::max_context_tokens must be >= 2, got ",
                 opt_.max_context_tokens);
}

Engine::~Engine() = default;

uint64_t Engine::submit(RequestParams params, TokenCallback on_event) {
    const ModelInfo& info = model_.info();
    const int64_t n = int64_t(params.prompt.size());
    SLUICE_CHECK(n > 0, "request: the prompt is empty");
    SLUICE_CHECK(n + 1 <= opt_.max_context_tokens, "request: the prompt has ", n, " tokens; with one generated token ",
                 "that exceeds max_context_tokens (", opt_.max_context_tokens, ")");
    const int64_t max_pos = info.max_position_embeddings;
    SLUICE_CHECK(max_pos <= 0 || n < max_pos, "request: the prompt has ", n, " tokens; the model has ", max_pos,
                 " positions (max_position_embeddings)");
    for (size_t i = 0; i < params.prompt.size(); ++i)
        SLUICE_CHECK(params.prompt[i] >= 0 && params.prompt[i] < info.vocab_size, "request: prompt token ", i, " (",
                     params.prompt[i], ") is outside the vocabulary [0, ", info.vocab_size, ")");
    SLUICE_CHECK(params.max_new_tokens >= 1, "request: max_new_tokens must be >= 1, got ", params.max_new_tokens);
    for (const auto& [id, bias] : params.logit_bias) {
        SLUICE_CHECK(id >= 0 && id < info.vocab_size, "request: logit_bias id ", id, " is outside the vocabulary [0, ",
                     info.vocab_size, ")");
        SLUICE_CHECK(std::isfinite(bias), "request: logit_bias of id ", id, " is not a finite number");
    }
    SLUICE_CHECK(std::isfinite(params.frequency_penalty) && std::isfinite(params.presence_penalty),
                 "request: frequency_penalty and presence_penalty must be finite numbers");
    // what can never fit is clamped here (finish "length"); the generated tokens never go past the model's positions
    params.max_new_tokens = std::min(params.max_new_tokens, opt_.max_context_tokens - n);
    if (max_pos > 0) params.max_new_tokens = std::min(params.max_new_tokens, max_pos - n);
    auto r = std::make_unique<Request>(std::move(params), std::move(on_event));  // Sampler validates sampling
    r->need_tokens = r->n_prompt + r->p.max_new_tokens;
    uint64_t id = 0;
    {
        std::lock_guard lock(mu_);
        id = r->id = next_id_++;
        waiting_.push_back(std::move(r));
        stats_.waiting = int64_t(waiting_.size());
    }
    cv_.notify_all();
    return id;
}

void Engine::cancel(uint64_t id) {
    {
        std::lock_guard lock(mu_);
        auto it = std::find_if(waiting_.begin(), waiting_.end(), [&](const auto& r) { return r->id == id; });
        if (it != waiting_.end()) {
            // out of the queue now; its event goes out on the engine thread at the next step
            dropped_.push_back(std::move(*it));
            waiting_.erase(it);
            stats_.waiting = int64_t(waiting_.size());
        } else {
            cancelled_.push_back(id);  // running (or unknown / finished: ignored by the next step)
        }
    }
    cv_.notify_all();
}

bool Engine::idle() const {
    std::lock_guard lock(mu_);
    return waiting_.empty() && dropped_.empty() && stats_.running == 0;
}

EngineStats Engine::stats() const {
    std::lock_guard lock(mu_);
    return stats_;
}

bool Engine::emit(Request& r, const TokenEvent& ev) {
    try {
        return r.on_event(ev);
    } catch (...) {
        return false;  // a throwing callback ends its request, not the engine
    }
}

void Engine::finish(Request& r) {
    r.done = true;
    r.seq.reset();
    reserved_tokens_ -= r.reserved_tokens;
    r.reserved_tokens = 0;
}

void Engine::end_with(Request& r, FinishReason why, const std::string& error) {
    TokenEvent ev;
    ev.finish = why;
    ev.n_prompt = r.n_prompt;
    ev.n_generated = r.n_generated;
    ev.error = error;
    finish(r);
    emit(r, ev);
}

void Engine::remove_done() {
    std::erase_if(running_, [](const auto& r) { return r->done; });
    SLUICE_ASSERT(reserved_tokens_ >= 0 && (reserved_tokens_ == 0) == running_.empty(), "reserved ", reserved_tokens_,
                  " tokens with ", running_.size(), " requests running");
    std::lock_guard lock(mu_);
    stats_.running = int64_t(running_.size());
}

void Engine::admit_and_cancel() {
    std::vector<std::unique_ptr<Request>> dropped;
    std::vector<uint64_t> cancelled;
    {
        std::lock_guard lock(mu_);
        dropped.swap(dropped_);
        cancelled.swap(cancelled_);
    }
    for (auto& r : dropped) end_with(*r, FinishReason::cancelled);
    for (auto& r : running_)
        if (std::find(cancelled.begin(), cancelled.end(), r->id) != cancelled.end())
            end_with(*r, FinishReason::cancelled);
    std::erase_if(running_, [](const auto& r) { return r->done; });

    std::lock_guard lock(mu_);
    // FIFO: the head waits until it fits; later requests never overtake it
    while (!waiting_.empty() && int64_t(running_.size()) < opt_.max_sequences &&
           reserved_tokens_ + waiting_.front()->need_tokens <= opt_.max_context_tokens) {
        auto r = std::move(waiting_.front());
        waiting_.pop_front();
        r->seq = model_.new_sequence();
        r->reserved_tokens = r->need_tokens;
        reserved_tokens_ += r->reserved_tokens;
        running_.push_back(std::move(r));
    }
    stats_.waiting = int64_t(waiting_.size());
    stats_.running = int64_t(running_.size());
}

int64_t Engine::step() {
    admit_and_cancel();

    // decode rows first, then prefill chunks in admission order. The decode rows always fit: a prefill only runs
    // in rows the decoders leave free, and each of its rows adds at most one decoder for the next step.
    Batch batch;
    std::vector<Request*> in_batch;  // sequence index -> request
    std::vector<SequenceState*> seqs;
    for (auto& r : running_) {
        if (r->pending < 0) continue;
        batch.add(r->pending, r->n_prompt + r->n_generated - 1, int32_t(seqs.size()), true);
        in_batch.push_back(r.get());
        seqs.push_back(r->seq.get());
    }
    SLUICE_ASSERT(batch.size() <= opt_.max_batch_rows, batch.size(), " decode rows exceed max_batch_rows");
    int64_t n_prompt_rows = 0;
    for (auto& r : running_) {
        if (r->n_prefilled == r->n_prompt || batch.size() >= opt_.max_batch_rows) continue;
        const int64_t i1 = std::min(r->n_prompt, r->n_prefilled + opt_.max_batch_rows - batch.size());
        for (int64_t i = r->n_prefilled; i < i1; ++i)
            batch.add(r->p.prompt[size_t(i)], i, int32_t(seqs.size()), i + 1 == r->n_prompt);
        n_prompt_rows += i1 - r->n_prefilled;
        r->n_prefilled = i1;
        in_batch.push_back(r.get());
        seqs.push_back(r->seq.get());
    }
    if (batch.size() == 0) {
        remove_done();
        return 0;
    }

    std::vector<float> logits;
    const auto t0 = std::chrono::steady_clock::now();
    try {
        model_.forward(batch, seqs, logits);
    } catch (const std::exception& e) {
        // the states of these sequences are in an unknown state: end them all, keep serving the others
        for (Request* r : in_batch) end_with(*r, FinishReason::error, e.what());
        remove_done();
        std::lock_guard lock(mu_);
        stats_.steps++;
        return batch.size();
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

    const int64_t V = model_.info().vocab_size;
    SLUICE_ASSERT(int64_t(logits.size()) == batch.n_logits() * V, "forward returned ", logits.size(), " logits for ",
                  batch.n_logits(), " rows");
    const auto& eos = model_.info().eos_token_ids;
    std::vector<float> adjusted;
    int64_t n_sampled = 0, logits_row = 0;
    for (int64_t row = 0; row < batch.size(); ++row) {
        if (!batch.want_logits[size_t(row)]) continue;
        Request& r = *in_batch[size_t(batch.seq[size_t(row)])];
        std::span<const float> dist(logits.data() + logits_row++ * V, size_t(V));
        if (r.adjusts) dist = adjust(r, dist, adjusted);
        const int32_t id = r.sampler.sample(dist);
        ++n_sampled;
        ++r.n_generated;
        if (r.p.frequency_penalty != 0 || r.p.presence_penalty != 0) ++r.counts[id];
        TokenEvent ev;
        ev.id = id;
        ev.n_prompt = r.n_prompt;
        ev.n_generated = r.n_generated;
        ev.logits = dist;
        const auto is_in = [id](const std::vector<int32_t>& ids) {
            return std::find(ids.begin(), ids.end(), id) != ids.end();
        };
        if ((r.p.stop_at_eos && is_in(eos)) || is_in(r.p.stop_ids))
            ev.finish = FinishReason::stop;
        else if (r.n_generated >= r.p.max_new_tokens)
            ev.finish = FinishReason::length;
        const bool keep = emit(r, ev);
        if (ev.finish != FinishReason::none || !keep)
            finish(r);
        else
            r.pending = id;
    }
    remove_done();
    std::lock_guard lock(mu_);
    if (const StreamingExpertSource* src = model_.streaming()) {
        const ExpertIoStats& io = src->stats();
        stats_.experts_requested = io.experts_requested;
        stats_.experts_read = io.experts_read;
        stats_.expert_bytes_read = io.bytes_read;
        stats_.io_wait_ms = io.io_wait_ms;
    }
    stats_.steps++;
    stats_.rows += batch.size();
    stats_.prompt_tokens += n_prompt_rows;
    stats_.generated_tokens += n_sampled;
    stats_.forward_ms += ms;
    return batch.size();
}

std::span<const float> Engine::adjust(const Request& r, std::span<const float> in, std::vector<float>& out) {
    out.assign(in.begin(), in.end());
    for (const auto& [id, count] : r.counts)
        out[size_t(id)] -= r.p.frequency_penalty * float(count) + r.p.presence_penalty * (count > 0 ? 1.0f : 0.0f);
    for (const auto& [id, bias] : r.p.logit_bias) out[size_t(id)] += bias;
    return out;
}

void Engine::run(const std::atomic<bool>& stop) {
    while (!stop.load()) {
        if (step() > 0) continue;
        std::unique_lock lock(mu_);
        cv_.wait_for(lock, std::chrono::milliseconds(100), [&] {
            return stop.load() || !waiting_.empty() || !dropped_.empty() || !cancelled_.empty() || stats_.running > 0;
        });
    }
}

void Engine::run_until_idle() {
    while (!idle()) step();
}

}  // namespace sluice
