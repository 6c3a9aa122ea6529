// The engine's record of one request (runtime/engine.h); shared by the engine's source files only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "runtime/draft_gate.h"
#include "runtime/engine.h"

namespace sluice {

struct Engine::Request {
    uint64_t id = 0;
    RequestParams p;
    TokenCallback on_event;
    Sampler sampler;
    std::unique_ptr<SequenceState> seq;  // created at admission, freed as soon as the request ends
    int64_t n_prompt = 0, n_prefilled = 0, n_generated = 0, n_cached = 0;
    int64_t need_tokens = 0;                      // prompt + max_new_tokens
    int64_t reserved_tokens = 0;                  // its share of max_context_tokens while running, else 0
    int64_t n_resume = 0;                         // generated tokens to prefill again after a preemption
    std::vector<int32_t> generated;               // every generated id (a preempted request prefills them again)
    int64_t computed = 0;                         // rows its states held before preemptions (recomputed later)
    bool preempted = false;                       // between preempt() and its return to the queue
    bool was_preempted = false;
    int32_t pending = -1;                         // the last sampled id, to be fed back as the next decode row
    std::vector<int32_t> context;                 // prompt + generated (only when drafting)
    std::optional<DraftGate> gate;                // RequestParams::draft_gate
    std::unordered_map<int32_t, int64_t> counts;  // generated id -> count (only with penalties)
    bool adjusts = false;                         // any penalty or bias: sample from an adjusted copy
    std::unique_ptr<TokenConstraint> constraint;  // structured output (RequestParams::constraint)
    bool done = false;
    // prompt positions where a state goes into the prefix cache (recurrent models; see cache_points), ascending
    std::vector<int64_t> points;
    bool caching_prompt = false;             // its prompt's last chunk ran in this pass (see postprocess)
    std::unique_ptr<SequenceState> parked;   // its state when it ended in that pass, for postprocess to cache

    Request(RequestParams params, TokenCallback cb)
        : p(std::move(params)), on_event(std::move(cb)), sampler(p.sampling), n_prompt(int64_t(p.prompt.size())) {
        adjusts = p.frequency_penalty != 0 || p.presence_penalty != 0 || !p.logit_bias.empty();
    }
    // Rows to prefill: the prompt, then after a preemption the tokens generated before it.
    int64_t n_feed() const { return n_prompt + n_resume; }
    int32_t feed(int64_t i) const { return i < n_prompt ? p.prompt[size_t(i)] : generated[size_t(i - n_prompt)]; }
    std::vector<int32_t> fed_tokens() const {
        std::vector<int32_t> t = p.prompt;
        t.insert(t.end(), generated.begin(), generated.begin() + n_resume);
        return t;
    }
};

}  // namespace sluice
