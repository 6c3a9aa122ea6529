// What a forward pass runs in: the backend its ops dispatch to, the CPU thread pool they split work over, the
// scratch arena its activations are carved from (sized once, core/scratch_arena.h), and per-pass statistics.
// One object, so that where a pass runs is chosen apart from the model's math: the runtime makes it
// (make_exec_context in models/model.h: the Engine, a DraftModel, tests) and passes it to Model::forward; the model
// owns no pool and no arena. The dispatching ops (ops::matmul, ops::attention, ops::kda_recurrent_heads) take the
// context and run on its backend, so two contexts in one process may run on different backends (a draft on the CPU
// beside a target on CUDA); the process-wide setting (ops::backend(), ops.h) is only the default a new context takes.
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
    // n_threads <= 0: all cores. backend: where the context's ops run; by default the process-wide setting at this
    // moment (SLUICE_DEVICE, the CLI's --device). Checked here, before the pool starts: throws sluice::Error when it
    // is Cuda and no CUDA device is usable, rather than at the pass's first matmul.
    explicit ExecContext(int n_threads, ops::Backend backend = ops::backend())
        : backend_(ops::check_usable(backend, "execution context on the CUDA backend")), pool_(n_threads) {}
    ExecContext(const ExecContext&) = delete;
    ExecContext& operator=(const ExecContext&) = delete;

    ThreadPool& pool() { return pool_; }
    ScratchArena& arena() { return arena_; }
    const ScratchArena& arena() const { return arena_; }
    // Where ops::matmul, ops::attention and ops::kda_recurrent_heads run when given this context; fixed for its life.
    ops::Backend backend() const { return backend_; }
    const PassStats& stats() const { return stats_; }

    // Counts a pass of `rows` rows; what the pass carves inside the returned scope is given back when it ends.
    [[nodiscard]] ScratchArena::Scope begin_pass(int64_t rows) {
        ++stats_.passes;
        stats_.rows += uint64_t(rows);
        return ScratchArena::Scope(arena_);
    }

private:
    ops::Backend backend_;  // before pool_: checked before the threads start
    ThreadPool pool_;
    ScratchArena arena_;
    PassStats stats_;
};

}  // namespace sluice
