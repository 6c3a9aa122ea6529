// Continuous batching (see engine.h): admission under the sequence and token limits, one flat Batch per step made
// of decode rows, draft rows, then prefill chunks, per-request sampling with penalties and bias, draft
// verification with state rollback, and request endings (stop, length, cancel, callback, forward errors). A
// request's tokens are bit-identical to running it alone, with or without drafts.
#include "runtime/engine.h"
#include "runtime/engine_request.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iterator>
#include <unordered_map>

#include "core/enum_names.h"
#include "core/error.h"
#include "core/log.h"

namespace sluice {

const char* to_string(FinishReason r) {
    // in FinishReason's order
    static constexpr const char* kNames[] = {"", "stop", "length", "cancelled", "error", "schema_unsatisfiable"};
    static_assert(std::size(kNames) == size_t(FinishReason::unsatisfiable) + 1, "a name for every FinishReason");
    return enum_name(kNames, r, "");
}

Engine::Engine(Model& model, const EngineOptions& options)
    : model_(model), ctx_(make_exec_context(model)), opt_(options) {
    SLUICE_CHECK(opt_.max_batch_rows >= 1, "EngineOptions::max_batch_rows must be >= 1, got ", opt_.max_batch_rows);
    SLUICE_CHECK(opt_.max_sequences >= 1, "EngineOptions::max_sequences must be >= 1, got ", opt_.max_sequences);
    SLUICE_CHECK(opt_.max_context_tokens >= 2, "EngineOptions::max_context_tokens must be >= 2, got ",
                 opt_.max_context_tokens);
    const StateLayout& layout = model_.new_sequence()->layout();
    recurrent_ = layout.has_recurrent();
    std::unique_ptr<StateDir> disk;
    if (!opt_.state_dir.empty()) {
        disk = std::make_unique<StateDir>(opt_.state_dir, opt_.state_dir_bytes, model_.info().state_file_model(),
                                          recurrent_);
        if (!disk->enabled())
            log_info("sluice: warning: ", disk->disabled_reason(), "; running without the SSD tier of the prefix cache");
    }
    if (opt_.prefix_cache_bytes > 0 || (disk && disk->enabled()))
        prefix_cache_ = std::make_unique<PrefixCache>(opt_.prefix_cache_bytes, std::move(disk),
                                                      [this] { return model_.new_sequence(); });
    if (prefix_cache_) stats_.prefix_cache = prefix_cache_->stats();  // what the state directory held at start
    if (prefix_cache_ && recurrent_) {
        block_tokens_ = opt_.cache_block_tokens;
        if (block_tokens_ < 0) {  // at most 8 per context, within a quarter of the cache, at least 1024 apart
            const uint64_t per = std::max<uint64_t>(layout.recurrent_bytes(), 1);
            const int64_t n = int64_t(std::min<uint64_t>(8, prefix_cache_->capacity_bytes() / 4 / per));
            block_tokens_ = n <= 0 ? 0 : std::max<int64_t>(1024, (opt_.max_context_tokens / n + 255) / 256 * 256);
        }
    }
}

Engine::~Engine() = default;

uint64_t Engine::submit(RequestParams params, TokenCallback on_event) {
    std::vector<Submission> one;
    one.push_back({std::move(params), std::move(on_event)});
    return submit_all(std::move(one)).front();
}

std::vector<uint64_t> Engine::submit_all(std::vector<Submission> requests) {
    std::vector<std::unique_ptr<Request>> made;
    for (auto& s : requests) made.push_back(make_request(std::move(s.params), std::move(s.on_event)));
    std::vector<uint64_t> ids;
    {
        std::lock_guard lock(mu_);
        for (auto& r : made) {
            ids.push_back(r->id = next_id_++);
            waiting_.push_back(std::move(r));
        }
        stats_.waiting = int64_t(waiting_.size());
    }
    cv_.notify_all();
    return ids;
}

std::unique_ptr<Engine::Request> Engine::make_request(RequestParams params, TokenCallback on_event) {
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
    SLUICE_CHECK(params.max_new_tokens >= 0, "request: max_new_tokens must be >= 0, got ", params.max_new_tokens);
    SLUICE_CHECK(params.draft_tokens >= 0, "request: draft_tokens must be >= 0, got ", params.draft_tokens);
    SLUICE_CHECK(params.draft_tokens == 0 || params.drafter || (params.ngram_min >= 1 && params.ngram_max >= params.ngram_min),
                 "request: prompt lookup needs 1 <= ngram_min <= ngram_max");
    for (const auto& [id, bias] : params.logit_bias) {
        SLUICE_CHECK(id >= 0 && id < info.vocab_size, "request: logit_bias id ", id, " is outside the vocabulary [0, ",
                     info.vocab_size, ")");
        SLUICE_CHECK(std::isfinite(bias), "request: logit_bias of id ", id, " is not a finite number");
    }
    SLUICE_CHECK(std::isfinite(params.frequency_penalty) && std::isfinite(params.presence_penalty),
                 "request: frequency_penalty and presence_penalty must be finite numbers");
    // what can never fit is clamped here (finish "length"); the generated tokens never go past the model's positions
    params.max_new_tokens = std::min(params.max_new_tokens, opt_.max_context_tokens - n);
    // a speculating request reserves its draft rows in every pass (see schedule), so they must fit one
    params.draft_tokens = std::min(params.draft_tokens, opt_.max_batch_rows - 1);
    if (max_pos > 0) params.max_new_tokens = std::min(params.max_new_tokens, max_pos - n);
    auto r = std::make_unique<Request>(std::move(params), std::move(on_event));  // Sampler validates sampling
    if (r->p.constraint) r->constraint = r->p.constraint();
    r->need_tokens = r->n_prompt + r->p.max_new_tokens;
    if (r->p.draft_tokens > 0) r->context = r->p.prompt;
    if (r->p.draft_tokens > 0 && r->p.draft_gate) {
        SLUICE_CHECK(std::isfinite(r->p.draft_bytes_per_token) && r->p.draft_bytes_per_token >= 0,
                     "request: draft_bytes_per_token must be a finite number >= 0");
        r->gate.emplace(draft_cost(model_, r->p.draft_bytes_per_token), r->p.draft_tokens);
    }
    return r;
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

void Engine::finish(Request& r, bool keep_state) {
    r.done = true;
    // what it ran (prompt + all but the last generated token) can serve a later request's prompt
    if (keep_state && prefix_cache_ && r.seq && r.n_prefilled == r.n_feed()) {
        if (r.caching_prompt)
            r.parked = std::move(r.seq);  // postprocess caches it (with its snapshot) after this pass
        else
            prefix_cache_->insert(std::move(r.seq));
    }
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
    ev.n_cached = r.n_cached;
    finish(r, why != FinishReason::error);
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

    grow_reservations();

    std::lock_guard lock(mu_);
    // FIFO: the head waits until it fits; later requests never overtake it
    while (!waiting_.empty() && int64_t(running_.size()) < opt_.max_sequences &&
           reserved_tokens_ + initial_reservation(*waiting_.front()) <= opt_.max_context_tokens &&
           !wait_for_shared_prefill(*waiting_.front())) {
        auto r = std::move(waiting_.front());
        waiting_.pop_front();
        // the longest prefix some earlier request ran (at least the last token to feed is computed: its logits)
        if (prefix_cache_ && !r->p.prompt_logits) r->seq = prefix_cache_->lookup(r->fed_tokens(), r->n_feed() - 1);
        if (r->seq) {
            r->n_prefilled = r->seq->n_past();
            if (r->n_resume == 0) {
                r->n_cached = r->n_prefilled;
                stats_.cached_prompt_tokens += r->n_cached;
            }
        } else {
            r->seq = model_.new_sequence();
        }
        plan_points(*r);
        r->reserved_tokens = initial_reservation(*r);
        reserved_tokens_ += r->reserved_tokens;
        running_.push_back(std::move(r));
    }
    stats_.waiting = int64_t(waiting_.size());
    stats_.running = int64_t(running_.size());
}

int64_t Engine::initial_reservation(const Request& r) const {
    // a preempted request comes back with all it may need, so it never grows (nor preempts) again: no thrashing
    if (r.p.prompt_logits || !model_.recompute_is_exact() || r.was_preempted) return r.need_tokens;
    return std::min(r.need_tokens, r.n_feed() + std::max<int64_t>(1, opt_.reserve_step_tokens));
}

// Every decoding request's reservation must hold what its state holds after this step's pass (the pending row and
// its draft rows). Growth that does not fit preempts the most recently admitted preemptable request, the grower
// itself included; the oldest request always fits (its need_tokens <= max_context_tokens).
void Engine::grow_reservations() {
    bool any = false;
    for (size_t i = 0; i < running_.size(); ++i) {
        Request& r = *running_[i];
        if (r.done || r.preempted || r.pending < 0) continue;
        const int64_t need_now = std::min(r.need_tokens, r.n_prompt + r.n_generated + r.p.draft_tokens);
        if (need_now <= r.reserved_tokens) continue;
        const int64_t grown = std::min(r.need_tokens, std::max(need_now, r.reserved_tokens + opt_.reserve_step_tokens));
        while (!r.preempted && reserved_tokens_ + grown - r.reserved_tokens > opt_.max_context_tokens) {
            Request* victim = nullptr;
            for (size_t j = running_.size(); j-- > 0 && !victim;)
                if (!running_[j]->done && !running_[j]->preempted && !running_[j]->p.prompt_logits)
                    victim = running_[j].get();
            SLUICE_ASSERT(victim, "no request to preempt while growing a reservation");
            preempt(*victim);
            any = true;
        }
        if (r.preempted) continue;
        reserved_tokens_ += grown - r.reserved_tokens;
        r.reserved_tokens = grown;
    }
    if (!any) return;
    // preempted requests go back to the head of the queue, in admission order
    std::vector<std::unique_ptr<Request>> back;
    for (auto& r : running_)
        if (r->preempted) back.push_back(std::move(r));
    std::erase_if(running_, [](const auto& r) { return !r; });
    std::lock_guard lock(mu_);
    for (auto it = back.rbegin(); it != back.rend(); ++it) {
        (*it)->preempted = false;
        waiting_.push_front(std::move(*it));
    }
    stats_.preemptions += int64_t(back.size());
    stats_.waiting = int64_t(waiting_.size());
    stats_.running = int64_t(running_.size());
}

// Drops the request's state (into the prefix cache when there is one) and its reservation; when it is admitted
// again it prefills its prompt and the tokens it generated (the pending one last: that row gives the next logits).
void Engine::preempt(Request& r) {
    if (r.seq) r.computed = std::max(r.computed, r.seq->n_past());
    if (r.pending >= 0) {
        r.n_resume = r.n_generated;
        r.pending = -1;
    }  // else preempted while prefilling: it starts its feed over
    if (prefix_cache_ && r.seq && r.seq->n_past() > 0) prefix_cache_->insert(std::move(r.seq));
    r.seq.reset();
    r.n_prefilled = 0;
    reserved_tokens_ -= r.reserved_tokens;
    r.reserved_tokens = 0;
    r.preempted = true;
    r.was_preempted = true;
}

// One step's work: the batch, which request each sequence index is, and per request the rows whose logits it samples.
struct Engine::Pass {
    Batch batch;
    std::vector<Request*> in_batch;  // sequence index -> request
    std::vector<SequenceState*> seqs;
    std::vector<std::vector<int32_t>> drafts;  // sequence index -> its draft tokens (decode rows only)
    std::vector<std::vector<DraftDist>> draft_q;  // sequence index -> what each draft was drawn from, or empty
    std::vector<int64_t> first_row;            // sequence index -> its first batch row
    std::vector<uint8_t> decoding;             // sequence index -> its first row is a decode row
    std::vector<std::string> draft_error;      // sequence index -> why its drafter failed (ends it after the pass)
    int64_t n_prompt_rows = 0, n_recomputed_rows = 0, n_sampled = 0, n_decode = 0;
    std::vector<float> logits;
    double ms = 0;
};

int64_t Engine::step() {
    admit_and_cancel();
    Pass pass;
    schedule(pass);
    if (pass.batch.size() == 0) {
        remove_done();
        return 0;
    }
    if (run(pass)) postprocess(pass);
    remove_done();
    std::lock_guard lock(mu_);
    stats_.steps++;
    stats_.rows += pass.batch.size();
    if (pass.n_decode > 0) stats_.decode_steps++;
    stats_.prompt_tokens += pass.n_prompt_rows;
    stats_.recomputed_tokens += pass.n_recomputed_rows;
    stats_.generated_tokens += pass.n_sampled;
    stats_.forward_ms += pass.ms;
    if (prefix_cache_) stats_.prefix_cache = prefix_cache_->stats();
    if (const StreamingExpertSource* src = model_.streaming()) {
        const ExpertIoStats& io = src->stats();
        stats_.experts_requested = io.experts_requested;
        stats_.experts_read = io.experts_read;
        stats_.expert_bytes_read = io.bytes_read;
        stats_.io_wait_ms = io.io_wait_ms;
    }
    return pass.batch.size();
}

// Decode rows first, then draft rows, then prefill chunks in admission order. A decoding request's rows (1 +
// draft_tokens) always fit: a prompt's last prefill row, which makes it a decoder, runs only while the rows every
// decoder may need next pass fit the budget. So a request's drafts never depend on what else is in the batch, and
// neither do its tokens -- sampled ones included, whose random draws depend on how many drafts were verified.
void Engine::schedule(Pass& p) {
    Batch& b = p.batch;
    const auto add_seq = [&](Request* r, bool decoding) {
        p.in_batch.push_back(r);
        p.seqs.push_back(r->seq.get());
        p.drafts.emplace_back();
        p.draft_q.emplace_back();
        p.first_row.push_back(b.size());
        p.decoding.push_back(decoding ? 1 : 0);
        p.draft_error.emplace_back();
        return int32_t(p.seqs.size() - 1);
    };
    for (auto& r : running_) {
        if (r->pending < 0) continue;
        b.add(r->pending, r->n_prompt + r->n_generated - 1, add_seq(r.get(), true), true);
        ++p.n_decode;
    }
    SLUICE_ASSERT(b.size() <= opt_.max_batch_rows, b.size(), " decode rows exceed max_batch_rows");
    const int64_t V = model_.info().vocab_size;
    int64_t reserved_next = 0;  // rows the decoders may need in the next pass
    for (Request* r : p.in_batch) reserved_next += 1 + r->p.draft_tokens;
    for (size_t si = 0; si < p.in_batch.size(); ++si) {
        Request& r = *p.in_batch[si];
        if (r.p.draft_tokens == 0) continue;
        // drafts beyond what may still be generated after the verified rows' own prediction are wasted
        int64_t max_draft = std::min(r.p.draft_tokens, r.p.max_new_tokens - r.n_generated - 1);
        if (max_draft <= 0) continue;
        if (r.gate) {  // the request's own history decides, never the batch (the rows stay reserved either way)
            max_draft = std::min(max_draft, r.gate->next());
            if (max_draft == 0) {
                std::lock_guard lock(mu_);
                ++stats_.gate_off_steps;
                continue;
            }
        }
        std::vector<int32_t> d;
        // a sampled request's model drafter draws its drafts (Sampler::draw_draft) and the verification uses the
        // distributions they were drawn from; a greedy request's, or one that ignores the pick, guesses
        std::vector<DraftDist> qs;
        std::vector<int32_t> picked;
        DraftPick pick;
        if (r.p.sampling.temperature > 0 && r.p.sample_drafts)
            pick = [&](std::span<const float> logits, std::span<const int64_t> offsets) {
                qs.emplace_back();
                picked.push_back(r.sampler.draw_draft(logits, offsets, qs.back()));
                return picked.back();
            };
        try {
            d = r.p.drafter ? r.p.drafter(r.context, max_draft, r.seq.get(), pick ? &pick : nullptr)
                            : lookup_draft(r.context, max_draft, r.p.ngram_min, r.p.ngram_max);
            if (int64_t(d.size()) > max_draft) d.resize(size_t(max_draft));
            for (int32_t t : d)
                SLUICE_CHECK(t >= 0 && t < V, "draft token ", t, " is outside the vocabulary [0, ", V, ")");
        } catch (const std::exception& e) {
            // its decode row is in this pass already: the request ends after it, not now
            p.draft_error[si] = cat("speculative decoding: ", e.what());
            continue;
        }
        if (d.empty()) continue;
        r.seq->snapshot();  // the restore point for rejected drafts (KDA: a copy plus a journal of the rows)
        const int64_t pos = r.n_prompt + r.n_generated;
        for (size_t j = 0; j < d.size(); ++j) b.add(d[j], pos + int64_t(j), int32_t(si), true);
        // the drawn distributions apply when the drafts are the draws, in order (else they are verified as
        // guesses: exact too, since the draws never touch the verification's generator)
        if (picked.size() >= d.size() && std::equal(d.begin(), d.end(), picked.begin())) {
            qs.resize(d.size());
            p.draft_q[si] = std::move(qs);
        }
        p.drafts[si] = std::move(d);
    }
    SLUICE_ASSERT(b.size() <= opt_.max_batch_rows, b.size(), " decode and draft rows exceed max_batch_rows");
    for (auto& r : running_) {
        const int64_t n_feed = r->n_feed();
        if (r->done || r->n_prefilled == n_feed || b.size() >= opt_.max_batch_rows) continue;
        int64_t i1 = std::min(n_feed, r->n_prefilled + opt_.max_batch_rows - b.size());
        if (i1 == n_feed && r->p.max_new_tokens > 0) {
            // its last row makes it a decoder: only if its rows fit the next pass beside the others'
            if (reserved_next + 1 + r->p.draft_tokens > opt_.max_batch_rows)
                i1 = n_feed - 1;
            else
                reserved_next += 1 + r->p.draft_tokens;
        }
        if (i1 <= r->n_prefilled) continue;
        const int32_t si = add_seq(r.get(), false);
        // the prompt's end (or a cache point inside this chunk) will be cached: recurrent state keeps a restore
        // point for the rows of this chunk
        if (prefix_cache_ && recurrent_ && (i1 == n_feed || snapshot_for_points(*r, r->n_prefilled, i1)))
            r->seq->snapshot();
        for (int64_t i = r->n_prefilled; i < i1; ++i) {
            const bool last = i + 1 == n_feed;
            b.add(r->feed(i), i, si, r->p.prompt_logits || (last && r->p.max_new_tokens > 0));
        }
        // prompt rows no earlier state of it held are prompt tokens; the rest run again after a preemption
        const int64_t fresh = std::max<int64_t>(0, std::min(i1, r->n_prompt) - std::max(r->n_prefilled, r->computed));
        p.n_prompt_rows += fresh;
        p.n_recomputed_rows += i1 - r->n_prefilled - fresh;
        r->n_prefilled = i1;
    }
}

bool Engine::run(Pass& p) {
    const auto t0 = std::chrono::steady_clock::now();
    try {
        model_.forward(*ctx_, p.batch, p.seqs, p.logits);
    } catch (const std::exception& e) {
        // the states of these sequences are in an unknown state: end them all, keep serving the others
        for (Request* r : p.in_batch)
            if (!r->done) end_with(*r, FinishReason::error, e.what());
        return false;
    }
    p.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    SLUICE_ASSERT(int64_t(p.logits.size()) == p.batch.n_logits() * model_.info().vocab_size, "forward returned ",
                  p.logits.size(), " logits for ", p.batch.n_logits(), " rows");
    return true;
}

void Engine::postprocess(Pass& p) {
    const int64_t V = model_.info().vocab_size;
    // each row's place among the rows that have logits, and each sequence's rows in batch order
    std::vector<std::vector<int64_t>> rows_of(p.in_batch.size());
    int64_t logits_row = 0;
    for (int64_t row = 0; row < p.batch.size(); ++row) {
        if (!p.batch.want_logits[size_t(row)]) continue;
        rows_of[size_t(p.batch.seq[size_t(row)])].push_back(logits_row++);
    }
    for (size_t si = 0; si < p.in_batch.size(); ++si) {
        Request& r = *p.in_batch[si];
        if (r.done) continue;
        if (!p.draft_error[si].empty()) {
            end_with(r, FinishReason::error, p.draft_error[si]);
            continue;
        }
        if (p.decoding[si]) {
            sample_rows(r, p, rows_of[si], p.drafts[si], p.draft_q[si]);
            continue;
        }
        // a prefill chunk: its prompt logits, then the first token after the last prompt row
        std::span<const int64_t> rows = rows_of[si];
        bool alive = true;
        if (r.p.prompt_logits) {
            const int64_t first = p.batch.positions[size_t(p.first_row[si])];
            for (size_t j = 0; j < rows.size() && alive; ++j) {
                TokenEvent ev;
                ev.n_prompt = r.n_prompt;
                ev.prompt_position = first + int64_t(j);
                ev.logits = std::span<const float>(p.logits.data() + rows[j] * V, size_t(V));
                if (!emit(r, ev)) {
                    finish(r);
                    alive = false;
                }
            }
        }
        if (!alive) continue;
        const int64_t start = p.batch.positions[size_t(p.first_row[si])];
        if (r.n_prefilled < r.n_feed()) {
            if (!r.points.empty()) {
                cache_points_reached(r, *r.seq, start, r.n_prefilled);
                r.seq->drop_snapshot();  // taken for the points (the prompt's last chunk takes its own)
            }
            continue;
        }
        // the first token goes out before the prompt's state goes into the cache: the cache's copies, replays and
        // file writes are not part of the time to first token (finish() parks the state of a request that ends now)
        r.caching_prompt = prefix_cache_ != nullptr;
        if (r.p.max_new_tokens == 0)
            end_with(r, FinishReason::length);
        else
            sample_rows(r, p, rows.last(1), {}, {});
        if (!r.caching_prompt) continue;
        r.caching_prompt = false;
        const SequenceState* st = r.seq ? r.seq.get() : r.parked.get();
        if (st && !r.points.empty()) cache_points_reached(r, *st, start, r.n_prefilled);
        if (r.parked) {
            prefix_cache_->insert(std::move(r.parked));
        } else if (r.seq) {
            prefix_cache_->insert(r.seq->fork());
            r.seq->drop_snapshot();
        }
    }
}

// Samples the request's first row; while the sampled token is the next draft, the row after it is valid too.
// Rejected drafts' rows leave the state (truncate back to the last kept one).
void Engine::sample_rows(Request& r, Pass& p, std::span<const int64_t> logit_rows, std::span<const int32_t> draft,
                         std::span<const DraftDist> draft_q) {
    const int64_t V = model_.info().vocab_size;
    SLUICE_ASSERT(logit_rows.size() == draft.size() + 1, "request rows ", logit_rows.size(), " for ", draft.size(),
                  " drafts");
    const int64_t pos0 = r.n_prompt + r.n_generated - 1;  // the position of the decode row
    std::vector<float> adjusted;
    size_t kept = 0;
    bool ended = false, unsatisfiable = false;
    const std::vector<int32_t> no_ids;
    for (;;) {
        std::span<const float> dist(p.logits.data() + logit_rows[kept] * V, size_t(V));
        if (r.adjusts) dist = adjust(r, dist, adjusted);
        if (r.constraint) {
            if (!r.adjusts) adjusted.assign(dist.begin(), dist.end());
            // eos is allowed only where the output may end, and only when it ends the request
            if (!r.constraint->mask(adjusted, r.p.stop_at_eos ? model_.info().eos_token_ids : no_ids)) {
                unsatisfiable = ended = true;
                break;
            }
            dist = adjusted;
        }
        // a draft is verified (kept with the probability the sampler gives it, else replaced by a draw from the
        // rest); after the last draft, or without one, the token is sampled
        Sampler::Verdict v{-1, false};
        if (kept < draft.size())
            v = draft_q.empty() ? r.sampler.verify(dist, draft[kept]) : r.sampler.verify(dist, draft[kept], draft_q[kept]);
        else
            v.id = r.sampler.sample(dist);
        ++p.n_sampled;
        ended = !take_token(r, v.id, dist);
        if (ended) break;
        if (v.accepted) {
            ++kept;
            continue;
        }
        r.pending = v.id;
        break;
    }
    if (!draft.empty()) {
        std::lock_guard lock(mu_);
        stats_.drafted += int64_t(draft.size());
        stats_.accepted += int64_t(kept);
        ++stats_.verify_steps;
    }
    if (!draft.empty() && r.gate) r.gate->record(int64_t(draft.size()), int64_t(kept));
    // the state keeps the rows of the tokens it was fed and the drafts that were kept (before it may be cached)
    if (kept < draft.size()) r.seq->truncate(pos0 + 1 + int64_t(kept));
    if (!draft.empty()) r.seq->drop_snapshot();  // the next draft takes a new one
    if (unsatisfiable) end_with(r, FinishReason::unsatisfiable);
    else if (ended) finish(r);
}

// Reports one sampled token; false when the request ends with it (the caller finishes it).
bool Engine::take_token(Request& r, int32_t id, std::span<const float> dist) {
    ++r.n_generated;
    r.generated.push_back(id);
    if (r.p.frequency_penalty != 0 || r.p.presence_penalty != 0) ++r.counts[id];
    if (r.p.draft_tokens > 0) r.context.push_back(id);
    if (r.constraint) r.constraint->accept(id);
    TokenEvent ev;
    ev.id = id;
    ev.n_prompt = r.n_prompt;
    ev.n_cached = r.n_cached;
    ev.n_generated = r.n_generated;
    ev.logits = dist;
    const auto is_in = [id](const std::vector<int32_t>& ids) {
        return std::find(ids.begin(), ids.end(), id) != ids.end();
    };
    if ((r.p.stop_at_eos && is_in(model_.info().eos_token_ids)) || is_in(r.p.stop_ids))
        ev.finish = FinishReason::stop;
    else if (r.constraint && r.constraint->finished())
        ev.finish = FinishReason::stop;  // the structured output is complete: nothing else may follow
    else if (r.n_generated >= r.p.max_new_tokens)
        ev.finish = FinishReason::length;
    const bool keep = emit(r, ev);
    return ev.finish == FinishReason::none && keep;
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
