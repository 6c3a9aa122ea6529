// What every MoE architecture's Model shares (deepseek_v3, kimi_linear, kimi_k3, gqa_moe, gpt_oss): the execution
// context its passes run in (thread pool and scratch arena, ops/exec_context.h), the routed experts' setup, the
// state layout and the info, with the Model accessors over them, and the last step of loading.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "models/expert_setup.h"
#include "models/model.h"
#include "ops/exec_context.h"

namespace sluice {

class MoeModel : public Model {
public:
    const ModelInfo& info() const override { return info_; }
    std::unique_ptr<SequenceState> new_sequence() const override { return std::make_unique<SequenceState>(layout_); }
    const ScratchArena* scratch_arena() const override { return &ctx_.arena(); }
    const StreamingExpertSource* streaming() const override { return experts_.streaming; }
    const ResidencyPlan* residency() const override { return experts_.plan ? &*experts_.plan : nullptr; }
    SpineStreamer* spine_streamer() const override { return experts_.spine.get(); }

protected:
    explicit MoeModel(const LoadOptions& opt) : ctx_(opt.n_threads) {}

    // After the layers are bound (info_ and layout_ filled): the experts' source (setup_experts, with the state
    // layout_ reserves for opt and the activations of activation_bytes(rows, look_ahead), look-ahead when experts
    // stream), one expert's size in info_, and the scratch arena sized once for opt.max_pass_rows.
    void finish_loading(const Checkpoint& ck, std::vector<std::vector<ExpertWeights>> experts, const LoadOptions& opt,
                        uint64_t spine_bytes, const std::function<uint64_t(int64_t rows, bool look_ahead)>& act_bytes,
                        SpineLayers spine) {
        const uint64_t state = layout_->reserve_bytes(opt.max_context_tokens, opt.max_sequences, opt.snapshot_rows);
        // under a budget experts stream, and with them the look-ahead routing that the plan's formula counts
        const bool look_ahead = opt.memory_budget_bytes > 0 || opt.stream_experts || !opt.streaming.experts_dirs.empty();
        experts_ = setup_experts(ck, std::move(experts), opt, spine_bytes, state,
                                 [&](int64_t rows) { return act_bytes(rows, look_ahead); }, std::move(spine));
        info_.expert_bytes = experts_.expert_bytes;
        ctx_.arena().reserve(activation_bytes(opt.max_pass_rows));
    }

    ExecContext ctx_;
    std::shared_ptr<const StateLayout> layout_;
    ExpertSetup experts_;
    ModelInfo info_;
};

}  // namespace sluice
