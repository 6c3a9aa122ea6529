#include "runtime/eagle3_drafter.h"

#include <algorithm>
#include <chrono>

#include "state/sequence_state.h"

namespace sluice {

struct Eagle3Drafter::Seq {
    Eagle3Model::Seq ctx;
    std::vector<int32_t> tokens;  // the tokens the cache rows were made from: rows + 1 of them (or none)
};

Eagle3Drafter::Eagle3Drafter(const std::string& dir, Model& target, int n_threads)
    : model_(Eagle3Model::load(dir, target, n_threads)) {
    target.set_hidden_taps(model_->config().tapped_layers());
}

Drafter Eagle3Drafter::drafter() {
    auto s = std::make_shared<Seq>();
    s->ctx = model_->new_seq();
    return [this, s](std::span<const int32_t> context, int64_t max_tokens, const SequenceState* target,
                     const DraftPick* pick) {
        return draft(*s, context, max_tokens, target, pick);
    };
}

std::vector<int32_t> Eagle3Drafter::draft(Seq& s, std::span<const int32_t> context, int64_t max_tokens,
                                          const SequenceState* target, const DraftPick* pick) {
    if (max_tokens <= 0 || context.size() < 2) return {};
    ++stats_.calls;
    const Eagle3Config& c = model_->config();
    const int64_t L = int64_t(context.size()) - 1;  // rows 0..L-1: the target's taps at p with the token at p + 1
    if (c.max_position_embeddings > 0 && L + max_tokens > c.max_position_embeddings) return {};
    const int64_t W = c.tap_width();
    if (!target_taps_cover(target, context.first(size_t(L)), W)) {
        ++stats_.no_taps;
        return {};
    }
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t same = int64_t(
        std::mismatch(s.tokens.begin(), s.tokens.end(), context.begin(), context.end()).first - s.tokens.begin());
    const int64_t keep = std::clamp<int64_t>(std::min(same - 1, s.ctx.rows()), 0, L - 1);
    s.ctx.truncate(keep);
    std::vector<float> taps(size_t((L - keep) * W));
    for (int64_t t = keep; t < L; ++t) std::copy_n(target->taps().row(t), W, taps.data() + (t - keep) * W);
    const Eagle3Model::Chain ch = model_->propose(s.ctx, taps.data(), context.data() + keep + 1, L - keep, max_tokens, pick);
    s.tokens.assign(context.begin(), context.end());
    ++stats_.chains;
    stats_.ingested += L - keep;
    stats_.drafted += int64_t(ch.drafts.size());
    stats_.ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return ch.drafts;
}

}  // namespace sluice
