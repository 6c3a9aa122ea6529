// What every MoE architecture's Model shares (deepseek_v3, kimi_linear, kimi_k3, gqa_moe, gpt_oss): the routed
// experts' setup, the state layout, the info, the embedding / final norm / LM head and what its passes were planned
// for, with the Model accessors over them, and the last step of loading. Its passes run in the ExecContext the caller gives forward().
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "models/expert_setup.h"
#include "models/forward_common.h"
#include "models/model.h"
#include "models/weights.h"
#include "ops/exec_context.h"

namespace sluice {

// The LM head under the hub's name "lm_head", or the embedding when the checkpoint has none and
// tie_word_embeddings is set; else an error naming the folder.
inline Weight bind_lm_head(const Checkpoint& ck, const std::string& dir, const Weight& embed, int64_t vocab, int64_t d,
                           bool tie_word_embeddings) {
    if (ck.has("lm_head.weight")) return bind_linear(ck, "lm_head", vocab, d);
    if (!tie_word_embeddings) fail(dir, ": tensor 'lm_head.weight' not found (and tie_word_embeddings is false)");
    return embed;
}

// Per-token state of n_layers GQA layers with k/v rows of kv_width floats.
inline std::shared_ptr<const StateLayout> gqa_state_layout(int64_t n_layers, int64_t kv_width) {
    auto layout = std::make_shared<StateLayout>();
    for (int64_t l = 0; l < n_layers; ++l) layout->add_kv(kv_width);
    return layout;
}

class MoeModel : public Model {
public:
    const ModelInfo& info() const override { return info_; }
    // Its caches' pages come from the model's pools, sized from the plan's state reservation (state/page_pool.h).
    std::unique_ptr<SequenceState> new_sequence() const override {
        return std::make_unique<SequenceState>(layout_, pages_);
    }
    ExecOptions exec_options() const override { return exec_; }
    const StreamingExpertSource* streaming() const override { return experts_.streaming; }
    const ResidencyPlan* residency() const override { return experts_.plan ? &*experts_.plan : nullptr; }
    SpineStreamer* spine_streamer() const override { return experts_.spine.get(); }
    // As planned: finish_loading's act_bytes, with look-ahead when the experts stream.
    uint64_t activation_bytes(int64_t rows) const override { return act_bytes_(rows, experts_.streaming != nullptr); }

protected:
    explicit MoeModel(const LoadOptions& opt) : exec_{opt.n_threads, opt.max_pass_rows} {}

    // After the layers are bound (info_ and layout_ filled): the experts' source (setup_experts, with the state
    // layout_ reserves for opt and the activations of activation_bytes(rows, look_ahead), look-ahead when experts
    // stream), and one expert's size in info_.
    void finish_loading(const Checkpoint& ck, std::vector<std::vector<ExpertWeights>> experts, const LoadOptions& opt,
                        uint64_t spine_bytes, const std::function<uint64_t(int64_t rows, bool look_ahead)>& act_bytes,
                        SpineLayers spine) {
        act_bytes_ = act_bytes;
        const uint64_t state = layout_->reserve_bytes(opt.max_context_tokens, opt.max_sequences, opt.snapshot_rows);
        // the per-token caches' pages: what the plan reserves for them, a hard bound when the budget makes it binding
        pages_ = std::make_shared<StatePages>(
            *layout_, StatePagePlan{opt.max_context_tokens, opt.max_sequences, opt.prefix_cache_bytes,
                                    opt.memory_budget_bytes > 0});
        // under a budget experts stream, and with them the look-ahead routing that the plan's formula counts
        const bool look_ahead = opt.memory_budget_bytes > 0 || opt.stream_experts || !opt.streaming.experts_dirs.empty();
        experts_ = setup_experts(ck, std::move(experts), opt, spine_bytes, state,
                                 [&](int64_t rows) { return act_bytes(rows, look_ahead); }, std::move(spine));
        info_.expert_bytes = experts_.expert_bytes;
    }

    // A pass's end, after its layers: the sequences' tokens recorded, the experts' layers closed, and the logits of
    // the final residual stream x [n, d].
    void finish_pass(ExecContext& ctx, const Batch& batch, std::span<SequenceState* const> seqs,
                     const RowGroups& rows_of, const float* x, int64_t d, float eps,
                     std::vector<float>& logits) {
        append_rows(batch, seqs, rows_of);
        experts_.end_layers();
        head_logits(x, batch, d, norm_, eps, lm_head_, ctx, logits);
    }

    ExecOptions exec_;
    // A pass's rows by sequence, refilled every pass (group_rows). Like the experts' source and the spine streamer,
    // this makes a model run one pass at a time, whatever contexts its passes come from.
    RowGroups rows_of_;
    Weight embed_, lm_head_;   // [vocab, hidden]
    std::vector<float> norm_;  // the final norm [hidden]
    std::shared_ptr<const StateLayout> layout_;
    ExpertSetup experts_;
    ModelInfo info_;

private:
    std::function<uint64_t(int64_t rows, bool look_ahead)> act_bytes_;
    std::shared_ptr<StatePages> pages_;
};

}  // namespace sluice
