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

void prefill(Model& model, SequenceState& seq, std::span<const int32_t> prompt, int64_t chunk,
             std::vector<float>& logits, bool every_position) {
    SLUICE_CHECK(!prompt.empty(), "the prompt is empty");
    SLUICE_CHECK(chunk > 0, "prefill chunk must be > 0");
    SequenceState* seqs[] = {&seq};
    std::vector<float> part;
    Batch b;
    logits.clear();
    for (size_t i0 = 0; i0 < prompt.size(); i0 += size_t(chunk)) {
        b.clear();
        const size_t i1 = std::min(prompt.size(), i0 + size_t(chunk));
        for (size_t i = i0; i < i1; ++i) b.add(prompt[i], int64_t(i), 0, every_position || i + 1 == prompt.size());
        model.forward(b, seqs, part);
        logits.insert(logits.end(), part.begin(), part.end());
    }
}

bool is_eos(const ModelInfo& info, int32_t id) {
    return std::find(info.eos_token_ids.begin(), info.eos_token_ids.end(), id) != info.eos_token_ids.end();
}

std::vector<float> prompt_logits(Model& model, std::span<const int32_t> prompt, int64_t chunk) {
    auto seq = model.new_sequence();
    std::vector<float> all;
    prefill(model, *seq, prompt, chunk, all, true);
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
    prefill(model, *seq, prompt, opt.prefill_chunk, logits);
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
        if (opt.stop_at_eos && is_eos(info, id)) {
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
