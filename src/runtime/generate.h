// The single-sequence generation loop shared by the CLI (and later the server): prefill the prompt in chunks,
// then decode one token per step, streaming each token to a callback.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "models/model.h"
#include "runtime/sampler.h"

namespace sluice {

struct GenerateOptions {
    int64_t max_new_tokens = 16;
    int64_t prefill_chunk = 512;  // prompt rows per forward pass
    bool stop_at_eos = true;
    SamplingParams sampling;
};

struct GenerateResult {
    std::vector<int32_t> ids;       // generated ids (without the prompt)
    int64_t n_prompt = 0;
    double prefill_ms = 0, decode_ms = 0;
    std::string stop_reason;        // "length" or "eos" or "callback"
};

// on_token(id) is called for every generated id; returning false stops generation.
GenerateResult generate(Model& model, std::span<const int32_t> prompt, const GenerateOptions& opt,
                        const std::function<bool(int32_t)>& on_token = nullptr);

// Runs `prompt` through `seq` from position 0 in forward passes of at most `chunk` rows. logits: the last
// position's next-token logits [vocab], or with every_position all positions' [n, vocab].
void prefill(Model& model, SequenceState& seq, std::span<const int32_t> prompt, int64_t chunk,
             std::vector<float>& logits, bool every_position = false);

// Whether id is one of the model's end-of-sequence ids.
bool is_eos(const ModelInfo& info, int32_t id);

// Logits for every prompt position ([n, vocab]: row i = next-token logits after prompt[0..i]), prefilled in chunks.
std::vector<float> prompt_logits(Model& model, std::span<const int32_t> prompt, int64_t chunk);

}  // namespace sluice
