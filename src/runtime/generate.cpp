#include "runtime/generate.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace sluice {

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

std::vector<float> prompt_logits(Model& model, std::span<const int32_t> prompt, int64_t chunk) {
    SLUICE_CHECK(!prompt.empty(), "the prompt is empty");
    SLUICE_CHECK(chunk > 0, "prefill chunk must be > 0");
    auto seq = model.new_sequence();
    SequenceState* seqs[] = {seq.get()};
    std::vector<float> all, part;
    Batch b;
    for (size_t i0 = 0; i0 < prompt.size(); i0 += size_t(chunk)) {
        b.clear();
        const size_t i1 = std::min(prompt.size(), i0 + size_t(chunk));
        for (size_t i = i0; i < i1; ++i) b.add(prompt[i], int64_t(i), 0, true);
        model.forward(b, seqs, part);
        all.insert(all.end(), part.begin(), part.end());
    }
    return all;
}

GenerateResult generate(Model& model, std::span<const int32_t> prompt, const GenerateOptions& opt,
                        const std::function<bool(int32_t)>& on_token) {
    SLUICE_CHECK(!prompt.empty(), "the prompt is empty");
    SLUICE_CHECK(opt.prefill_chunk > 0, "prefill chunk must be > 0");
    const auto& info = model.info();
    Sampler sampler(opt.sampling);
    GenerateResult r;
    r.n_prompt = int64_t(prompt.size());
    r.stop_reason = "length";
    auto seq = model.new_sequence();
    SequenceState* seqs[] = {seq.get()};
    std::vector<float> logits;
    Batch b;
    auto t0 = std::chrono::steady_clock::now();
    for (size_t i0 = 0; i0 < prompt.size(); i0 += size_t(opt.prefill_chunk)) {
        b.clear();
        const size_t i1 = std::min(prompt.size(), i0 + size_t(opt.prefill_chunk));
        for (size_t i = i0; i < i1; ++i) b.add(prompt[i], int64_t(i), 0, i + 1 == prompt.size());
        model.forward(b, seqs, logits);
    }
    r.prefill_ms = ms_since(t0);
    t0 = std::chrono::steady_clock::now();
    int64_t pos = int64_t(prompt.size());
    for (int64_t step = 0; step < opt.max_new_tokens; ++step) {
        const int32_t id = sampler.sample(std::span<const float>(logits.data(), size_t(info.vocab_size)));
        r.ids.push_back(id);
        if (on_token && !on_token(id)) {
            r.stop_reason = "callback";
            break;
        }
        if (opt.stop_at_eos && std::find(info.eos_token_ids.begin(), info.eos_token_ids.end(), id) != info.eos_token_ids.end()) {
            r.stop_reason = "eos";
            break;
        }
        if (step + 1 == opt.max_new_tokens) break;
        b.clear();
        b.add(id, pos++, 0, true);
        model.forward(b, seqs, logits);
    }
    r.decode_ms = ms_since(t0);
    return r;
}

}  // namespace sluice
