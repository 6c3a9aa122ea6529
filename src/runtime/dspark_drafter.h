// The DSpark drafter (models/dspark.h) behind the Drafter interface (runtime/draft.h): it turns on the target's
// hidden-state taps (Model::set_hidden_taps with the drafter's target_layer_ids) and, per request, keeps the
// drafter's context caches. A call with `context` (prompt + generated so far, the last token not yet run by the
// target) and the target's state (which holds the other tokens, with their tap rows):
//  - keeps the context rows whose tokens are unchanged (the common prefix with what it ingested before),
//  - ingests the target's tap rows for the rest up to the last token: after a verify pass these are the prompt or
//    the drafts the target accepted and the token it chose, so what was accepted extends the draft context,
//  - proposes one block with the last token as the anchor: up to block_size (7) drafts from one non-causal pass,
//  - with the confidence cut on (set_confidence_cut; the commands turn it on with the draft gate) and a confidence
//    head in the checkpoint, keeps only as many drafts as pay for their verification (draft_gate.h's
//    confidence_cut, with the target's pass bytes): DSpark's confidence-scheduled verification.
// Without tap rows for the whole context (no target state, or a state restored from a file) it drafts nothing.
// The target verifies every draft, so the output is the target's own whatever the drafter proposes.
//
// Threads: a DSparkDrafter and its drafters are used from one thread at a time (the engine thread).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "models/dspark.h"
#include "models/model.h"
#include "runtime/draft.h"

namespace sluice {

struct DSparkStats {
    int64_t calls = 0;        // drafter calls that asked for >= 1 token
    int64_t blocks = 0;       // block passes run
    int64_t ingested = 0;     // context rows ingested (re-ingested after a divergence included)
    int64_t drafted = 0;      // drafts proposed
    int64_t no_taps = 0;      // calls that drafted nothing for want of the target's tap rows
    int64_t cut = 0;          // drafts the confidence cut dropped (not counted in `drafted`)
    double ms = 0;            // time in ingest and block passes
};

class DSparkDrafter {
public:
    // Loads the drafter from dir and turns on `target`'s taps (the target must outlive this).
    DSparkDrafter(const std::string& dir, Model& target, int n_threads = 0);

    // A drafter for one request, with its own context caches.
    Drafter drafter();
    // Verify only the drafts the confidence head says pay (a drafter without a confidence head is not cut).
    void set_confidence_cut(bool on) { confidence_cut_ = on; }
    bool has_confidence_head() const { return model_->config().enable_confidence_head; }
    DSparkModel& model() { return *model_; }
    const DSparkStats& stats() const { return stats_; }

private:
    struct Seq;
    std::vector<int32_t> draft(Seq& s, std::span<const int32_t> context, int64_t max_tokens,
                               const SequenceState* target, const DraftPick* pick);
    std::unique_ptr<DSparkModel> model_;
    const Model& target_;
    bool confidence_cut_ = false;
    DSparkStats stats_;
};

}  // namespace sluice
