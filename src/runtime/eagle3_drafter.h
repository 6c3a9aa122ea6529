// The EAGLE-3 drafter (models/eagle3.h) behind the Drafter interface (runtime/draft.h): it turns on the target's
// hidden-state taps (Model::set_hidden_taps with the layers before the drafter's one-based aux layer ids) and, per
// request, keeps the drafter's MLA cache. A call with `context` (prompt + generated so far, the last token not yet
// run by the target) and the target's state (which holds the other tokens, with their tap rows):
//  - keeps the cache rows whose inputs are unchanged (row p reads the taps at p and the token at p + 1, so it stays
//    while tokens 0..p+1 are those it was made from), except the last, which is run again to draft,
//  - adds rows for the rest from the target's tap rows: after a verify pass these are the drafts the target accepted
//    and the token it chose, so the drafter's context follows the target's hidden states, never its own guesses,
//  - drafts up to max_tokens tokens autoregressively from the last row, then drops the chain's rows (truncate), so
//    the cache stays in step with what the target kept.
// Without tap rows for the whole context (no target state, or a state restored from a file) it drafts nothing.
// The target verifies every draft, so the output is the target's own whatever the drafter proposes.
//
// Threads: an Eagle3Drafter and its drafters are used from one thread at a time (the engine thread).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "models/eagle3.h"
#include "models/model.h"
#include "runtime/draft.h"

namespace sluice {

struct Eagle3Stats {
    int64_t calls = 0;     // drafter calls that asked for >= 1 token
    int64_t chains = 0;    // draft chains run
    int64_t ingested = 0;  // committed rows added (re-added after a divergence included)
    int64_t drafted = 0;   // drafts proposed
    int64_t no_taps = 0;   // calls that drafted nothing for want of the target's tap rows
    double ms = 0;         // time in the drafter's passes
};

class Eagle3Drafter {
public:
    // Loads the drafter from dir and turns on `target`'s taps (the target must outlive this).
    Eagle3Drafter(const std::string& dir, Model& target, int n_threads = 0);

    // A drafter for one request, with its own cache.
    Drafter drafter();
    Eagle3Model& model() { return *model_; }
    const Eagle3Stats& stats() const { return stats_; }

private:
    struct Seq;
    std::vector<int32_t> draft(Seq& s, std::span<const int32_t> context, int64_t max_tokens,
                               const SequenceState* target, const DraftPick* pick);
    std::unique_ptr<Eagle3Model> model_;
    Eagle3Stats stats_;
};

}  // namespace sluice
