#include "runtime/dspark_drafter.h"

#include <algorithm>
#include <chrono>

#include "runtime/draft_gate.h"

namespace sluice {

struct DSparkDrafter::Seq {
    DSparkModel::Seq ctx;
    std::vector<int32_t> tokens;  // the tokens of the ingested context rows
};

DSparkDrafter::DSparkDrafter(const std::string& dir, Model& target, int n_threads)
    : model_(DSparkModel::load(dir, target, n_threads)), target_(target) {
    target.set_hidden_taps(model_->config().target_layer_ids);
}

Drafter DSparkDrafter::drafter() {
    auto s = std::make_shared<Seq>();
    s->ctx = model_->new_seq();
    return [this, s](std::span<const int32_t> context, int64_t max_tokens, const SequenceState* target,
                     const DraftPick* pick) {
        return draft(*s, context, max_tokens, target, pick);
    };
}

std::vector<int32_t> DSparkDrafter::draft(Seq& s, std::span<const int32_t> context, int64_t max_tokens,
                                          const SequenceState* target, const DraftPick* pick) {
    if (max_tokens <= 0 || context.empty()) return {};
    ++stats_.calls;
    const DSparkConfig& c = model_->config();
    const int64_t L = int64_t(context.size()) - 1;  // context rows: every token but the anchor
    if (c.max_position_embeddings > 0 && L + c.block_size > c.max_position_embeddings) return {};
    const int64_t W = c.context_width();
    if (!target_taps_cover(target, context.first(size_t(L)), W)) {
        ++stats_.no_taps;
        return {};
    }
    const auto t0 = std::chrono::steady_clock::now();
    // keep the rows whose tokens (so whose target hidden states) are unchanged
    const int64_t have = int64_t(s.tokens.size());
    int64_t keep = int64_t(std::mismatch(s.tokens.begin(), s.tokens.end(), context.begin(), context.begin() + L).first -
                           s.tokens.begin());
    keep = std::min(keep, L);
    if (keep < have) {
        s.ctx.truncate(keep);
        s.tokens.resize(size_t(keep));
    }
    if (keep < L) {
        std::vector<float> rows(size_t((L - keep) * W));
        for (int64_t t = keep; t < L; ++t)
            std::copy_n(target->taps().row(t), W, rows.data() + (t - keep) * W);
        model_->ingest(s.ctx, rows.data(), L - keep);
        s.tokens.insert(s.tokens.end(), context.begin() + keep, context.begin() + L);
        stats_.ingested += L - keep;
    }
    DSparkModel::Block b = model_->propose(s.ctx, context[size_t(L)], std::min(max_tokens, c.block_size), pick);
    ++stats_.blocks;
    if (confidence_cut_ && !b.confidence.empty()) {
        // the target's pass bytes now (its residency plan decides what a row costs); the block is already drafted
        const auto keep = size_t(confidence_cut(draft_cost(target_, 0), b.confidence));
        stats_.cut += int64_t(b.drafts.size() - keep);
        b.drafts.resize(keep);
    }
    stats_.drafted += int64_t(b.drafts.size());
    stats_.ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return b.drafts;
}

}  // namespace sluice
