// Where a model's routed experts come from, decided once for every MoE architecture: the memory map (resident),
// or SSD through the streaming source with an expert cache sized by the residency plan when a memory budget is
// given, or a packed expert store (--experts-dir) validated against the bound views. Architectures bind their
// experts as views, then hand them here.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "experts/expert_source.h"
#include "experts/residency.h"
#include "experts/spine_streamer.h"
#include "experts/spine_warmer.h"
#include "experts/streaming_expert_source.h"
#include "formats/checkpoint.h"
#include "models/model.h"

namespace sluice {

struct ExpertSetup {
    std::unique_ptr<ExpertSource> source;
    StreamingExpertSource* streaming = nullptr;  // set when experts stream
    std::optional<ResidencyPlan> plan;           // set when a memory budget was given
    uint64_t expert_bytes = 0;                   // one routed expert (all matrices and scales)
    std::unique_ptr<SpineStreamer> spine;        // set when the budget streams the matrices of some layers
    std::unique_ptr<SpineWarmer> warmer;         // reads the resident layers' matrices ahead (unless --no-prefetch)

    // Every architecture calls this before layer l uses its weights (waits for a streamed layer's bytes, and asks
    // for the next resident layers' first reads).
    void begin_layer(int64_t l) {
        if (warmer) warmer->begin_layer(l);
        if (spine) spine->begin_layer(l);
    }
    // ... and this once the last layer has run (the first streamed layer's read starts during the head).
    void end_layers() {
        if (spine) spine->end_pass();
    }
};

// Each layer's streamable spine matrices (attention projections, dense MLP, shared experts, latent projections;
// not routers or norms, which stay resident), for SpineStreamer.
using SpineLayers = std::vector<std::vector<Weight*>>;
inline void append_matrices(std::vector<Weight*>& out, const std::vector<Weight*>& more) {
    out.insert(out.end(), more.begin(), more.end());
}

// spine_bytes: non-expert weight bytes; state_bytes: the per-sequence state reserved for
// opt.max_context_tokens (the architecture knows its cache sizes); activation_bytes(rows): the scratch arena of a pass
// of that many rows (Model::activation_bytes), reserved for opt.max_pass_rows beside the state; spine_layers: pointers into the model's own
// layer structs, which must not move afterwards (they may be rebound into spine slots). Throws Error when the
// budget is too small.
ExpertSetup setup_experts(const Checkpoint& ck, std::vector<std::vector<ExpertWeights>> experts, const LoadOptions& opt,
                          uint64_t spine_bytes, uint64_t state_bytes,
                          const std::function<uint64_t(int64_t rows)>& activation_bytes, SpineLayers spine_layers);

// plan_residency with the activations of a pass of `rows` rows reserved beside state_bytes (plan.activation_bytes);
// when they are what makes the budget too small, the error names the largest pass that fits.
ResidencyPlan plan_residency_for_rows(uint64_t budget, uint64_t spine_fixed_bytes,
                                      std::span<const uint64_t> layer_bytes, uint64_t state_bytes,
                                      const std::function<uint64_t(int64_t rows)>& activation_bytes, int64_t rows,
                                      uint64_t staging_bytes, int64_t force_first_streamed = -1);

// What an architecture without its own activation formula reserves for a pass's activations (and then allocates
// per pass rather than from an arena sized for them).
inline constexpr uint64_t kUnplannedActivationBytes = uint64_t(64) << 20;

}  // namespace sluice
