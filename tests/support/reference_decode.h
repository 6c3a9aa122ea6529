// The plain single-sequence decode loop, written against Model::forward alone: the oracle the engine's clients
// (generate, speculative decoding, batching) are compared with, so those tests do not compare the engine with itself.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "models/model.h"
#include "ops/exec_context.h"
#include "runtime/sampler.h"

namespace sluice::test {

struct ReferenceResult {
    std::vector<int32_t> ids;
    std::string stop_reason;  // "length" or "eos"
};

// Prefill in chunks of `chunk` rows, then one row per step; the model's eos ids stop it when stop_at_eos.
inline ReferenceResult reference_generate(Model& model, std::span<const int32_t> prompt, int64_t max_new_tokens,
                                          bool stop_at_eos, const SamplingParams& sampling = {}, int64_t chunk = 7) {
    const ModelInfo& info = model.info();
    const size_t V = size_t(info.vocab_size);
    Sampler sampler(sampling);
    auto seq = model.new_sequence();
    auto ctx = make_exec_context(model);
    SequenceState* seqs[] = {seq.get()};
    std::vector<float> logits;
    Batch b;
    for (size_t i0 = 0; i0 < prompt.size(); i0 += size_t(chunk)) {
        b.clear();
        const size_t i1 = std::min(prompt.size(), i0 + size_t(chunk));
        for (size_t i = i0; i < i1; ++i) b.add(prompt[i], int64_t(i), 0, i + 1 == prompt.size());
        model.forward(*ctx, b, seqs, logits);
    }
    ReferenceResult r{{}, "length"};
    int64_t pos = int64_t(prompt.size());
    for (int64_t step = 0; step < max_new_tokens; ++step) {
        const int32_t id = sampler.sample(std::span<const float>(logits.data(), V));
        r.ids.push_back(id);
        if (stop_at_eos && std::find(info.eos_token_ids.begin(), info.eos_token_ids.end(), id) !=
                               info.eos_token_ids.end()) {
            r.stop_reason = "eos";
            break;
        }
        if (step + 1 == max_new_tokens) break;
        b.clear();
        b.add(id, pos++, 0, true);
        model.forward(*ctx, b, seqs, logits);
    }
    return r;
}

}  // namespace sluice::test
