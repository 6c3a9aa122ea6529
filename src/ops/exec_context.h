// What a forward pass runs in: the backend its ops dispatch to, the CPU thread pool they split work over, the
// scratch arena its activations are carved from (sized once, core/scratch_arena.h), and per-pass statistics.
// One object, so that where a pass runs is chosen apart from the model's math: the runtime makes it
// (make_exec_context in models/model.h: the Engine, a DraftModel, tests) and passes it to Model::forward; the model
// owns no pool and no arena. The ops still read the backend from the process-wide setting (ops.h).
#pragma once

#include <cstdint>

#include "core/scratch_arena.h"
#include "core/thread_pool.h"
#include "ops/ops.h"

namespace sluice {

struct PassStats {
    uint64_t passes = 0;  // forward passes begun
    uint64_t rows = 0;    // their rows, all together
};

class ExecContext {
public:
    explicit ExecContext(int n_threads) : pool_(n_threads) {}  // n_threads <= 0: all cores
    ExecContext(const ExecContext&) = delete;
    ExecContext& operator=(const ExecContext&) = delete;

    ThreadPool& pool() { return pool_; }
    ScratchArena& arena() { return arena_; }
    const ScratchArena& arena() const { return arena_; }
    // Where ops::matmul and ops::attention run (ops.h: SLUICE_DEVICE, the CLI's --device).
    ops::Backend backend() const { return ops::backend(); }
    const PassStats& stats() const { return stats_; }

    // Counts a pass of `rows` rows; what the pass carves inside the returned scope is given back when it ends.
    [[nodiscard]] ScratchArena::Scope begin_pass(int64_t rows) {
        ++stats_.passes;
        stats_.rows += uint64_t(rows);
        return ScratchArena::Scope(arena_);
    }

private:
    ThreadPool pool_;
    ScratchArena arena_;
    PassStats stats_;
};

}  // namespace sluice
