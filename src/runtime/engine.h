// The one loop every client runs on (generate, logits, speculative decoding, serve, batch). Continuous batching:
// many sequences share every forward pass, so each routed expert is read once for all the rows that need it.
// step() = schedule (one decode row of every running sequence, its draft rows when it speculates, then the next
// prefill chunks of waiting prompts, at most max_batch_rows rows in one flat Batch) -> run (one forward pass) ->
// postprocess (each request samples its rows with its own sampler, keeps the drafts that equal its choices, rolls
// its state back past the rest, and reports each token through its callback).
//
// A request's tokens are bit-identical to running it alone (generate()): the forward pass gives every row the same
// bits whatever else is in the batch, and each request owns its sampler, penalties and seed.
//
// Memory: the tokens reserved by all running requests fit max_context_tokens, and at most max_sequences requests run
// at once; the model's memory plan reserves sequence state for exactly that (LoadOptions::max_context_tokens and
// ::max_sequences). A request is admitted (FIFO) with its prompt and reserve_step_tokens more (at most prompt +
// max_new_tokens) reserved, and its reservation grows by reserve_step_tokens as it generates. When growth does not
// fit, the most recently admitted request is preempted: its state is dropped (kept in the prefix cache when there
// is one), it goes back to the head of the queue, and when it runs again (with prompt + max_new_tokens reserved, so
// it never grows again) its prompt and generated tokens are prefilled again before it goes on, with the same
// sampler, so its tokens are exactly those it would have produced
// (Model::recompute_is_exact; a model where that is false, and prompt_logits requests, reserve prompt +
// max_new_tokens at admission and are never preempted). So one long request cannot hold the context that shorter
// ones could use.
//
// Threads: submit() and cancel() may be called from any thread; step() and run() from one engine thread, which is
// also the thread that calls the callbacks (keep them short: queue the event and return).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "models/model.h"
#include "ops/exec_context.h"
#include "runtime/draft.h"
#include "runtime/prefix_cache.h"
#include "runtime/sampler.h"
#include "runtime/token_constraint.h"

namespace sluice {

struct RequestParams {
    std::vector<int32_t> prompt;   // must not be empty
    int64_t max_new_tokens = 16;   // >= 0 (0: only the prompt runs, e.g. for prompt_logits; finish "length"); the
                                   // engine may lower it to what the context allows (finish "length")
    SamplingParams sampling;
    float frequency_penalty = 0.0f;  // OpenAI semantics: logit[t] -= frequency * count(t) + presence * (count(t) > 0)
    float presence_penalty = 0.0f;   // counts are over this request's generated tokens only
    std::map<int32_t, float> logit_bias;  // added to the logit of that id before sampling
    bool stop_at_eos = true;           // the model's eos ids end the request (finish "stop")
    std::vector<int32_t> stop_ids;     // further ids that end the request (finish "stop"); the id is reported
    // Report the next-token logits after every prompt position (events with id -1 and prompt_position set, in
    // order, before the first generated token).
    bool prompt_logits = false;
    // Speculative decoding: up to draft_tokens drafted tokens per decode step, verified as rows of the same forward
    // pass. Greedy: the tokens are exactly those of decoding without drafts. Sampled: a guessed draft is accepted
    // with the probability the request's sampler gives it, else replaced by a draw from the rest; a drawn one (see
    // sample_drafts) by min(1, p/q) and the residual (exact rejection sampling either way), so the tokens follow the
    // same distribution (not the same draws as without drafts: the random stream is used differently). 0 = off.
    // drafter empty: prompt lookup over n-grams of
    // ngram_min..ngram_max tokens.
    int64_t draft_tokens = 0;
    int64_t ngram_min = 1, ngram_max = 4;
    Drafter drafter;
    // The pays-off gate (runtime/draft_gate.h): each decode step verifies the number of drafts, up to draft_tokens,
    // that its own acceptance so far and the model's bytes per pass say gains most, and none while no length pays
    // (probing again later). A function of the request's own history, so its tokens stay independent of the batch.
    // Off: always draft_tokens.
    bool draft_gate = false;
    double draft_bytes_per_token = 0;  // the drafter's own bytes per drafted token (a draft model's; 0: lookup)
    // Sampled requests: a drafter with logits (draft model, DSpark, EAGLE-3) draws each draft as the request samples
    // (Sampler::draw_draft) and the draft is accepted with probability min(1, p/q), else the token is drawn from
    // max(0, p - q); false: it proposes its argmax, verified as a guess. Both exact; which accepts more depends on
    // how well the drafter's distribution matches the target's (docs/speculation.md).
    bool sample_drafts = true;
    // Structured output: a constraint made for this request masks every generated position (after penalties and
    // bias, before temperature and truncation); the request ends with finish "stop" once the output is complete,
    // and with finish "unsatisfiable" when no token may come next. Drafts are verified against the masked
    // distribution, so speculation keeps working (a masked draft is simply rejected). Empty: unconstrained.
    ConstraintFactory constraint;
    // Prompt lengths (0 < n < prompt size) where reuse is likely, e.g. where the chat template closed an assistant
    // turn: with a prefix cache, a model whose recurrent state cannot be cut back (Kimi's KDA) leaves the state of
    // the prompt's first n tokens in the cache as it prefills, so a later prompt that shares those n tokens (the
    // same history re-rendered) reuses them. Per-token caches need none (any head of a cached state is reusable).
    std::vector<int64_t> cache_points;
};

enum class FinishReason { none, stop, length, cancelled, error, unsatisfiable };
// "", "stop", "length", "cancelled", "error", "schema_unsatisfiable"
const char* to_string(FinishReason r);

struct TokenEvent {
    int32_t id = -1;            // the generated id; -1 in an event that only finishes (cancelled / error)
    FinishReason finish = FinishReason::none;  // set on the request's last event, none before
    int64_t n_prompt = 0;       // prompt tokens
    int64_t n_cached = 0;       // ... of which came from the prefix cache (not computed)
    int64_t n_generated = 0;    // generated tokens so far, this one included
    std::span<const float> logits;  // the distribution `id` was drawn from (after penalties, bias and a
                                    // constraint's mask, before temperature), valid only during the callback; empty
                                    // when id == -1
    std::string error;          // the message when finish == error
    int64_t prompt_position = -1;  // >= 0: a prompt_logits event (id -1): logits after prompt[0..prompt_position]
};

// Called on the engine thread. Return false to end the request now (no further events are sent for it); a callback
// that throws is treated the same way.
using TokenCallback = std::function<bool(const TokenEvent&)>;

struct EngineOptions {
    int64_t max_batch_rows = 512;      // rows per forward pass (decode rows first, prefill chunks in what is left;
                                       // so at most this many requests decode at once)
    int64_t max_sequences = 16;        // requests running at once
    int64_t max_context_tokens = 4096; // tokens reserved by all running requests together
    uint64_t prefix_cache_bytes = 0;   // > 0: keep finished prompts' states for reuse (runtime/prefix_cache.h)
    // A running request's share of max_context_tokens grows by this many tokens at a time (see Memory above).
    int64_t reserve_step_tokens = 64;
    // The prefix cache's SSD tier (runtime/state_dir.h): a directory and the bytes it may hold; empty: none.
    std::string state_dir;
    uint64_t state_dir_bytes = uint64_t(10) << 30;
    // Recurrent models with a prefix cache also leave a state at every multiple of this many prompt tokens (block
    // boundaries; see RequestParams::cache_points). -1: chosen from the cache's size (at most 8 per context, each
    // costing the recurrent state's bytes, within a quarter of the cache; never under 1024 tokens); 0: none.
    int64_t cache_block_tokens = -1;
};

struct EngineStats {
    int64_t steps = 0, rows = 0, prompt_tokens = 0, generated_tokens = 0;
    int64_t decode_steps = 0;          // steps that ran at least one decode row
    int64_t drafted = 0, accepted = 0; // draft tokens verified, and kept
    int64_t verify_steps = 0;          // a request's decode steps that verified at least one draft
    int64_t gate_off_steps = 0;        // a request's decode steps that drafted nothing because its gate said so
    int64_t cached_prompt_tokens = 0;  // prompt tokens taken from the prefix cache instead of computed
    int64_t preemptions = 0;           // running requests put back in the queue to make room (see Memory)
    int64_t recomputed_tokens = 0;     // rows run again for preempted requests (not in prompt_tokens)
    PrefixCacheStats prefix_cache;
    int64_t running = 0, waiting = 0;  // now
    double forward_ms = 0;
    // The model's routed-expert reads so far (streamed models; 0 otherwise), copied after each step on the engine
    // thread so other threads (the server's /metrics) read them without racing the reads.
    uint64_t experts_requested = 0, experts_read = 0, expert_bytes_read = 0;
    double io_wait_ms = 0;
};

class Engine {
public:
    Engine(Model& model, const EngineOptions& options);
    ~Engine();

    // Queues a request; throws Error when it can never run (empty prompt, prompt + 1 > max_context_tokens, prompt
    // not shorter than the model's positions, ids outside the vocabulary, max_new_tokens < 1, bad sampling values).
    // max_new_tokens is lowered to what max_context_tokens and the model's positions allow. Returns its id.
    uint64_t submit(RequestParams params, TokenCallback on_event);
    // Several requests queued together (all or none: one that can never run throws before any is queued), so the
    // next step admits them at once and their prefills share passes (several prompts of one API request). Ids in
    // order.
    struct Submission {
        RequestParams params;
        TokenCallback on_event;
    };
    std::vector<uint64_t> submit_all(std::vector<Submission> requests);
    // Ends a waiting or running request; its callback gets one final event with finish == cancelled (unless it
    // already finished). Unknown ids are ignored.
    void cancel(uint64_t id);

    // One forward pass over what is ready; returns the rows it ran (0: nothing to do).
    int64_t step();
    // Steps until stop is set, sleeping while there is no work (submit and cancel wake it).
    void run(const std::atomic<bool>& stop);
    // Steps until every submitted request has finished.
    void run_until_idle();

    bool idle() const;
    EngineStats stats() const;
    // The prefix cache (null without one), for a client that seeds it with a saved state or takes a state from it
    // (generate --session). Only while no step runs (the engine thread's).
    PrefixCache* prefix_cache() { return prefix_cache_.get(); }
    // With a prefix cache, a request whose prompt shares at least this many tokens with one still prefilling waits
    // for that prefill and reuses it (FIFO: those behind it wait too; one prefill at most).
    static constexpr int64_t kMinSharedPrefillTokens = 32;
    const EngineOptions& options() const { return opt_; }
    Model& model() { return model_; }
    ExecContext& exec_context() { return *ctx_; }

private:
    struct Request;
    Model& model_;
    std::unique_ptr<ExecContext> ctx_;  // what the passes run in (make_exec_context: the model's threads, rows)
    EngineOptions opt_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    uint64_t next_id_ = 1;
    std::deque<std::unique_ptr<Request>> waiting_;   // guarded by mu_
    std::vector<std::unique_ptr<Request>> dropped_;  // guarded by mu_: cancelled while waiting, told at next step
    std::vector<uint64_t> cancelled_;                // guarded by mu_: ids to end at the next step if running
    std::vector<std::unique_ptr<Request>> running_;  // engine thread only
    std::unique_ptr<PrefixCache> prefix_cache_;      // engine thread only
    int64_t reserved_tokens_ = 0;                    // engine thread only
    void grow_reservations();                        // engine thread: before admission, may preempt
    void preempt(Request& r);
    int64_t initial_reservation(const Request& r) const;
    bool wait_for_shared_prefill(const Request& r);
    // engine_prefix.cpp: the states a recurrent model leaves in the prefix cache inside a prompt
    bool recurrent_ = false;                         // the model's state has recurrent layers
    int64_t block_tokens_ = 0;                       // cache_block_tokens resolved (0: none)
    void plan_points(Request& r) const;              // at admission: r.points from its cache_points and blocks
    bool snapshot_for_points(const Request& r, int64_t start, int64_t end) const;
    // after a pass ran r's rows [start, end) into `from` (r's state)
    void cache_points_reached(Request& r, const SequenceState& from, int64_t start, int64_t end);
    EngineStats stats_;                              // guarded by mu_

    std::unique_ptr<Request> make_request(RequestParams params, TokenCallback on_event);  // submit's checks
    // engine thread only
    struct Pass;
    void admit_and_cancel();
    void schedule(Pass& pass);
    bool run(Pass& pass);
    void postprocess(Pass& pass);
    void sample_rows(Request& r, Pass& pass, std::span<const int64_t> logit_rows, std::span<const int32_t> draft,
                     std::span<const DraftDist> draft_q);
    bool take_token(Request& r, int32_t id, std::span<const float> dist);  // false: the request ends
    static bool emit(Request& r, const TokenEvent& ev);
    void finish(Request& r, bool keep_state = true);  // frees (or caches) its state, releases its reservation
    void end_with(Request& r, FinishReason why, const std::string& error = {});
    void remove_done();
    static std::span<const float> adjust(const Request& r, std::span<const float> in, std::vector<float>& out);
};

}  // namespace sluice
