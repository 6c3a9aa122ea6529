// The draft-model drafter: a second, smaller sluice Model in the same process proposes the drafts that the target
// verifies (runtime/draft.h, engine.h). It must share the target's tokenizer (check_draft_compatible, at load).
//
// Each request gets its own drafter (DraftModel::drafter()), which keeps its own SequenceState of the draft model.
// A call with `context` (prompt + generated so far) first brings that state to the context: it truncates to the
// common prefix with the tokens the state holds and feeds the missing tokens in one forward pass (chunked when
// longer than prefill_chunk); then it generates up to max_tokens drafts (the argmax, or the engine's DraftPick for a
// sampled request), one forward pass each, and
// rolls its state back to the context (a snapshot before drafting, then truncate). So after every call the state
// holds exactly `context`, and the next call, whose context normally extends it by the accepted drafts and one
// token, costs one catch-up pass plus the drafting passes. Exact on every architecture: truncate() restores
// recurrent (KDA) state by replay; a context that leaves the state behind its restore point resets it and refeeds.
//
// Threads: a DraftModel and its drafters are used from one thread at a time (the engine thread).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "models/model.h"
#include "ops/exec_context.h"
#include "runtime/draft.h"

namespace sluice {

struct DraftModelStats {
    int64_t calls = 0;            // drafter calls that asked for >= 1 token
    int64_t forward_passes = 0;   // draft-model forward passes (catch-up and drafting)
    int64_t fed_tokens = 0;       // context tokens fed to bring states up to date (refed after rollbacks included)
    int64_t drafted = 0;          // draft tokens proposed
    int64_t resets = 0;           // states reset and refed from 0 (context left the restore point behind)
    double ms = 0;                // time in draft-model forward passes
};

// Throws Error unless `draft` can draft for `target`: the same vocab_size, bos and eos ids (ModelInfo from each
// config), and byte-identical tokenizer files (tokenizer.json, tiktoken.model: each present in both folders or in
// neither). tokenizer_config.json is not compared (chat templates may differ without changing the ids). The message
// names the field or file and both values.
void check_draft_compatible(const ModelInfo& target, const std::string& target_dir, const ModelInfo& draft,
                            const std::string& draft_dir);

// How a process budget is split between the target and the draft (--memory and --draft-memory): the draft gets
// draft_bytes when given (> 0), else a quarter of the total; the target gets the rest. No total (0): no budgets.
struct MemorySplit {
    uint64_t target_bytes = 0, draft_bytes = 0;
};
MemorySplit split_memory_budget(uint64_t total_bytes, uint64_t draft_bytes);

class DraftModel {
public:
    // `model` is the loaded draft (its LoadOptions carry its memory share); prefill_chunk: rows per catch-up pass.
    explicit DraftModel(std::unique_ptr<Model> model, int64_t prefill_chunk = 512);
    // Loads draft_dir with `options` and checks it against the target (check_draft_compatible).
    static std::unique_ptr<DraftModel> load(const std::string& draft_dir, const LoadOptions& options,
                                            const Model& target, const std::string& target_dir,
                                            int64_t prefill_chunk = 512);

    // A drafter for one request, with its own sequence state (copies of it share that state).
    Drafter drafter();
    Model& model() { return *model_; }
    const DraftModelStats& stats() const { return stats_; }

private:
    struct Seq;
    std::vector<int32_t> draft(Seq& s, std::span<const int32_t> context, int64_t max_tokens, const DraftPick* pick);
    void feed(Seq& s, std::span<const int32_t> tokens);  // appends tokens, logits of the last into s.logits
    std::unique_ptr<Model> model_;
    std::unique_ptr<ExecContext> ctx_;  // the draft's passes run in their own context (its planned threads, rows)
    int64_t chunk_;
    DraftModelStats stats_;
};

}  // namespace sluice
