#include "runtime/speculative.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "runtime/sampler.h"

namespace sluice {

std::vector<int32_t> lookup_draft(std::span<const int32_t> context, int64_t max_tokens, int64_t ngram_min,
                                  int64_t ngram_max) {
    const int64_t L = int64_t(context.size());
    if (max_tokens <= 0) return {};
    for (int64_t n = std::min(ngram_max, L - 1); n >= std::max<int64_t>(ngram_min, 1); --n) {
        const auto suffix = context.subspan(size_t(L - n));
        // the most recent earlier occurrence: start positions L-n-1 down to 0
        for (int64_t s = L - n - 1; s >= 0; --s) {
            if (!std::equal(suffix.begin(), suffix.end(), context.begin() + s)) continue;
            const int64_t from = s + n, to = std::min(L, from + max_tokens);
            return {context.begin() + from, context.begin() + to};
        }
    }
    return {};
}

GenerateResult generate_speculative(Model& model, std::span<const int32_t> prompt, const GenerateOptions& opt,
                                    const SpeculativeOptions& spec, SpeculativeStats* stats,
                                    const std::function<bool(int32_t)>& on_token) {
    SLUICE_CHECK(!prompt.empty(), "the prompt is empty");
    SLUICE_CHECK(opt.prefill_chunk > 0, "prefill chunk must be > 0");
    SLUICE_CHECK(opt.sampling.temperature == 0.0f, "speculative decoding is greedy only (temperature 0), got ",
                 opt.sampling.temperature);
    SLUICE_CHECK(spec.draft_tokens >= 1 && spec.ngram_min >= 1 && spec.ngram_max >= spec.ngram_min,
                 "speculative options: draft_tokens >= 1 and 1 <= ngram_min <= ngram_max");
    using clock = std::chrono::steady_clock;
    const auto ms_since = [](clock::time_point t0) {
        return std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    };
    const ModelInfo& info = model.info();
    const int64_t V = info.vocab_size;
    auto seq = model.new_sequence();
    SequenceState* seqs[] = {seq.get()};
    Sampler sampler(opt.sampling);
    SpeculativeStats local;
    SpeculativeStats& st = stats ? *stats : local;
    GenerateResult r;
    r.n_prompt = int64_t(prompt.size());
    r.stop_reason = "length";

    std::vector<float> logits, rows;
    Batch b;
    auto t0 = clock::now();
    prefill(model, *seq, prompt, opt.prefill_chunk, logits);
    r.prefill_ms = ms_since(t0);
    t0 = clock::now();

    std::vector<int32_t> context(prompt.begin(), prompt.end());
    // Records one generated id as generate() does; false when generation ends with it.
    const auto emit = [&](int32_t id) {
        r.ids.push_back(id);
        context.push_back(id);
        if (on_token && !on_token(id)) {
            r.stop_reason = "callback";
            return false;
        }
        if (opt.stop_at_eos && is_eos(info, id)) {
            r.stop_reason = "eos";
            return false;
        }
        return int64_t(r.ids.size()) < opt.max_new_tokens;
    };
    int64_t pos = int64_t(prompt.size());
    bool go = opt.max_new_tokens > 0 && emit(sampler.sample(std::span<const float>(logits.data(), size_t(V))));
    while (go) {
        const int32_t id = r.ids.back();
        // drafts beyond what may still be generated after the verified rows' own prediction are wasted
        const int64_t remaining = opt.max_new_tokens - int64_t(r.ids.size());
        const int64_t max_draft = std::min(spec.draft_tokens, remaining - 1);
        std::vector<int32_t> draft = spec.drafter ? spec.drafter(context, max_draft)
                                                  : lookup_draft(context, max_draft, spec.ngram_min, spec.ngram_max);
        if (int64_t(draft.size()) > max_draft) draft.resize(size_t(std::max<int64_t>(max_draft, 0)));
        for (int32_t d : draft)
            SLUICE_CHECK(d >= 0 && d < V, "speculative: draft token ", d, " is outside the vocabulary [0, ", V, ")");
        // the restore point for rejected drafts (recurrent KDA state: a copy plus a journal of the verified rows)
        if (!draft.empty()) seq->snapshot();
        b.clear();
        b.add(id, pos, 0, true);
        for (size_t j = 0; j < draft.size(); ++j) b.add(draft[j], pos + 1 + int64_t(j), 0, true);
        model.forward(b, seqs, rows);
        ++st.forward_passes;
        st.drafted += int64_t(draft.size());
        // row j predicts the token after draft[j-1]; keep drafts while they are what the model would have chosen
        size_t kept = 0;
        int32_t next = sampler.sample(std::span<const float>(rows.data(), size_t(V)));
        while (go && kept < draft.size() && next == draft[kept]) {
            ++kept;
            go = emit(next);
            next = sampler.sample(std::span<const float>(rows.data() + kept * size_t(V), size_t(V)));
        }
        st.accepted += int64_t(kept);
        pos += 1 + int64_t(kept);
        if (kept < draft.size()) seq->truncate(pos);  // forget the rejected drafts' cache rows
        if (go) go = emit(next);
    }
    r.decode_ms = ms_since(t0);
    return r;
}

}  // namespace sluice
