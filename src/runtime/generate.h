// One request at a time on the engine (runtime/engine.h), for the CLI and tests: generate a continuation (with or
// without speculative drafts) or score a prompt. These are clients of the same loop that serves many requests, so
// what the engine learns (speculation, prefix reuse, a backend) they get too.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "models/model.h"
#include "runtime/draft.h"
#include "runtime/sampler.h"

namespace sluice {

struct GenerateOptions {
    int64_t max_new_tokens = 16;
    int64_t prefill_chunk = 512;  // prompt rows per forward pass
    bool stop_at_eos = true;
    SamplingParams sampling;
    // A state file (state/state_file.h) to continue from and to save into: when it holds a state of a prefix of the
    // prompt, only the rest is computed; afterwards it holds the state of the prompt and all generated tokens but
    // the last (which is never fed). A missing, damaged or foreign file only means computing from scratch (a
    // warning names why); the output is the same either way.
    std::string session_file;
};

struct GenerateResult {
    std::vector<int32_t> ids;       // generated ids (without the prompt)
    int64_t n_prompt = 0;
    double prefill_ms = 0, decode_ms = 0;  // until the first generated token, and after it
    std::string stop_reason;        // "length" or "eos" or "callback"
    int64_t n_cached = 0;           // prompt tokens taken from session_file instead of computed
};

// on_token(id) is called for every generated id; returning false stops generation. Throws Error when the request
// cannot run or its forward pass fails.
GenerateResult generate(Model& model, std::span<const int32_t> prompt, const GenerateOptions& opt,
                        const std::function<bool(int32_t)>& on_token = nullptr);

struct SpeculativeOptions {
    int64_t draft_tokens = 4;  // drafts verified per forward pass (>= 1)
    int64_t ngram_max = 4;     // longest context suffix looked up
    int64_t ngram_min = 1;     // shortest
    Drafter drafter;           // empty: prompt lookup (lookup_draft)
    bool gate = false;         // RequestParams::draft_gate: draft only as far as it pays (runtime/draft_gate.h)
    double draft_bytes_per_token = 0;  // the drafter's own bytes per drafted token (for the gate)
    bool sample_drafts = true;  // RequestParams::sample_drafts: at temperature > 0 a model drafter draws its drafts
};

struct SpeculativeStats {
    int64_t forward_passes = 0;  // decode passes (prefill not counted)
    int64_t drafted = 0;         // draft tokens verified
    int64_t accepted = 0;        // ... of which were kept
    int64_t gate_off_steps = 0;  // decode passes that drafted nothing because the gate said it would not pay
};

// generate() for temperature 0 with drafts verified in each decode pass: the same ids and stop reasons on every
// architecture (per-token caches are cut back, Kimi's KDA state restored from a snapshot and replayed). Throws Error
// when sampling is not greedy.
GenerateResult generate_speculative(Model& model, std::span<const int32_t> prompt, const GenerateOptions& opt,
                                    const SpeculativeOptions& spec, SpeculativeStats* stats = nullptr,
                                    const std::function<bool(int32_t)>& on_token = nullptr);

// Whether id is one of the model's end-of-sequence ids.
bool is_eos(const ModelInfo& info, int32_t id);

// Logits for every prompt position ([n, vocab]: row i = next-token logits after prompt[0..i]), prefilled in chunks.
std::vector<float> prompt_logits(Model& model, std::span<const int32_t> prompt, int64_t chunk);

}  // namespace sluice
