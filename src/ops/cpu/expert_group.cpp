// ops::expert_group (ops/moe_ops.h): a group of routed experts in one parallel section on the CPU, and
// experts_one_by_one, the same an expert at a time (the CUDA backend's way, and the op harness's comparison).
// Bits: every output element goes through the active path's matmul_rows for its own weight row and input row,
// whose arithmetic depends on neither the row range nor the other rows (ops/cpu/kernels.h), and ops::glu, which is
// elementwise; the gathers and scatters are copies. So a tile, a thread, a group give what separate calls give.
#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/phase_times.h"
#include "ops/cpu/matmul_call.h"
#include "ops/cuda/backend.h"
#include "ops/exec_context.h"
#include "ops/moe_ops.h"
#include "ops/ops.h"

namespace sluice::ops {

namespace {

// Rows gathered or scattered per work item: a prefill chunk's copies are tens of MB an expert.
int64_t copy_rows(int64_t hidden) { return std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(1, hidden)); }

// Each expert's part of the scratch: gathered rows [m, hidden], gate and up activations [m, I], outputs [m, hidden],
// each at a multiple of 16 floats from the start (64 bytes: the kernels' loads stay within cache lines).
struct ExpertScratch {
    float *xs, *g, *u, *ys;
};
ExpertScratch scratch_of(const GroupExpert& e, int64_t hidden, float*& at) {
    auto take = [&](int64_t floats) {
        float* p = at;
        at += (floats + kScratchAlignFloats - 1) / kScratchAlignFloats * kScratchAlignFloats;
        return p;
    };
    const int64_t inter = e.gate->rows;
    ExpertScratch s;
    s.xs = take(e.m * hidden);
    s.g = take(e.m * inter);
    s.u = take(e.m * inter);
    s.ys = take(e.m * hidden);
    return s;
}

void check_group(std::span<const GroupExpert> experts, int64_t hidden) {
    for (const GroupExpert& e : experts) {
        e.gate->check();
        e.up->check();
        e.down->check();
        const int64_t inter = e.gate->rows;
        SLUICE_CHECK(e.m > 0 && inter > 0 && hidden > 0 && e.gate->cols == hidden && e.up->cols == hidden &&
                         e.up->rows == inter && e.down->cols == inter && e.down->rows == hidden,
                     "expert_group: gate ", e.gate->rows, "x", e.gate->cols, ", up ", e.up->rows, "x", e.up->cols,
                     ", down ", e.down->rows, "x", e.down->cols, " for hidden size ", hidden, ", ", e.m, " rows");
    }
}

void gather(const GroupExpert& e, const float* x, int64_t top_k, int64_t hidden, float* xs, int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) std::copy_n(x + (e.slots[j] / top_k) * hidden, hidden, xs + j * hidden);
}

// Activation of columns [c0, c1) of each of the m rows of g and u, into g.
void activate(const GluSpec& act, float* g, const float* u, int64_t m, int64_t inter, int64_t c0, int64_t c1) {
    for (int64_t j = 0; j < m; ++j) glu(act, g + j * inter + c0, u + j * inter + c0, 1, c1 - c0, g + j * inter + c0);
}

// The work of a group: per expert, its gathers (stage 0), its gate/up tiles (stage 1), its down tiles (stage 2).
// Items are handed out in order, every stage-0 item before any stage-1 item and so on, so an item that waits for
// its expert's earlier stage waits only for items already running on other threads: no deadlock, at any thread
// count.
struct Item {
    int32_t expert;
    int8_t stage;
    int64_t begin, end;  // rows of x (stage 0) or of the weight (stages 1, 2)
};
constexpr int64_t kTileRows = 16 * cpu::kRowBlock;  // 256 rows: whole 32-row AMX sets, as cpu::matmul's ranges
// A group of fewer multiply-adds runs on the calling thread (about 50 us on one core): a small model's experts were
// below cpu::matmul's 256-row grain one by one, and ran there too, and waking the pool for them costs more than it
// saves when the cores are shared.
constexpr double kMinParallelMacs = double(1 << 20);

struct GroupState {
    std::vector<Item> items;
    std::vector<ExpertScratch> scratch;
    std::unique_ptr<std::atomic<int64_t>[]> left;  // [expert * 2 + stage]: stage 0 / 1 items not yet done
    size_t left_size = 0;
};
thread_local GroupState t_group;  // the calling thread's, grown once

inline void relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

void wait_zero(const std::atomic<int64_t>& c) {
    for (int i = 0; c.load(std::memory_order_acquire) != 0; ++i) {
        if (i < 256) relax();
        else std::this_thread::yield();
    }
}

}  // namespace

void cpu::expert_group(const GluSpec& act, std::span<const GroupExpert> experts, const float* x, int64_t top_k,
                       int64_t hidden, float* y, float* scratch, ThreadPool& pool) {
    if (experts.empty()) return;
    check_group(experts, hidden);
    GroupState& st = t_group;
    const size_t ne = experts.size();
    if (st.left_size < 2 * ne) {
        st.left_size = 2 * ne;
        st.left = std::make_unique<std::atomic<int64_t>[]>(st.left_size);
    }
    st.items.clear();
    st.scratch.clear();
    float* at = scratch;
    const int64_t per_copy = copy_rows(hidden);
    for (int8_t stage = 0; stage < 3; ++stage)
        for (size_t e = 0; e < ne; ++e) {
            const GroupExpert& g = experts[e];
            if (stage == 0) st.scratch.push_back(scratch_of(g, hidden, at));
            const int64_t rows = stage == 0 ? g.m : stage == 1 ? g.gate->rows : g.down->rows;
            const int64_t step = stage == 0 ? per_copy : kTileRows;
            for (int64_t r = 0; r < rows; r += step) st.items.push_back({int32_t(e), stage, r, std::min(rows, r + step)});
            if (stage < 2) st.left[2 * e + size_t(stage)].store((rows + step - 1) / step, std::memory_order_relaxed);
        }
    double macs = 0;
    for (const GroupExpert& g : experts)
        macs += double(g.m) * (double(g.gate->rows) * double(g.gate->cols) + double(g.up->rows) * double(g.up->cols) +
                               double(g.down->rows) * double(g.down->cols));
    phase_times::add_matmul_flops(2.0 * macs);
    // call ids: gate and up of expert e share one (the same x), down has its own
    const uint64_t calls = cpu::reserve_matmul_calls(2 * ne);
    const auto fn = cpu::active_matmul_rows();
    const std::vector<Item>& items = st.items;
    const std::vector<ExpertScratch>& sc = st.scratch;
    std::atomic<int64_t>* left = st.left.get();
    const int64_t n_items = int64_t(items.size());
    pool.parallel_for_dynamic(n_items, macs < kMinParallelMacs ? n_items : 1, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
            const Item& it = items[size_t(i)];
            const GroupExpert& g = experts[size_t(it.expert)];
            const ExpertScratch& s = sc[size_t(it.expert)];
            const size_t e2 = 2 * size_t(it.expert);
            // an item counts as done even when it throws, so that no other thread waits for it forever (the pool
            // rethrows the first exception once the section ends)
            struct Done {
                std::atomic<int64_t>* c;
                ~Done() {
                    if (c) c->fetch_sub(1, std::memory_order_acq_rel);
                }
            } done{it.stage < 2 ? &left[e2 + size_t(it.stage)] : nullptr};
            if (it.stage == 0) {
                gather(g, x, top_k, hidden, s.xs, it.begin, it.end);
            } else if (it.stage == 1) {
                wait_zero(left[e2]);
                const int64_t inter = g.gate->rows;
                cpu::MatmulCallMark mark(calls + e2);
                fn(*g.gate, s.xs, g.m, s.g, it.begin, it.end, cpu::thread_matmul_scratch(hidden));
                fn(*g.up, s.xs, g.m, s.u, it.begin, it.end, cpu::thread_matmul_scratch(hidden));
                activate(act, s.g, s.u, g.m, inter, it.begin, it.end);
            } else {
                wait_zero(left[e2 + 1]);
                const int64_t inter = g.gate->rows;
                {
                    cpu::MatmulCallMark mark(calls + e2 + 1);
                    fn(*g.down, s.g, g.m, s.ys, it.begin, it.end, cpu::thread_matmul_scratch(inter));
                }
                for (int64_t j = 0; j < g.m; ++j)
                    std::copy(s.ys + j * hidden + it.begin, s.ys + j * hidden + it.end,
                              y + g.slots[j] * hidden + it.begin);
            }
        }
    });
}

void experts_one_by_one(const GluSpec& act, std::span<const GroupExpert> experts, const float* x, int64_t top_k,
                        int64_t hidden, float* y, float* scratch, ExecContext& ctx) {
    check_group(experts, hidden);
    ThreadPool& pool = ctx.pool();
    const int64_t per_copy = copy_rows(hidden);
    float* at = scratch;
    for (const GroupExpert& e : experts) {
        const ExpertScratch s = scratch_of(e, hidden, at);
        const int64_t inter = e.gate->rows;
        pool.parallel_for(e.m, [&](int64_t j0, int64_t j1) { gather(e, x, top_k, hidden, s.xs, j0, j1); }, per_copy);
        matmul(*e.gate, s.xs, e.m, s.g, ctx);
        matmul(*e.up, s.xs, e.m, s.u, ctx);
        // elementwise, so the split over threads changes no bit; SiTU's tanh and exp are as costly as a small matmul
        pool.parallel_for(e.m * inter, [&](int64_t a, int64_t b) { glu(act, s.g + a, s.u + a, 1, b - a, s.g + a); },
                          16384);
        matmul(*e.down, s.g, e.m, s.ys, ctx);
        pool.parallel_for(e.m, [&](int64_t j0, int64_t j1) {
            for (int64_t j = j0; j < j1; ++j) std::copy_n(s.ys + j * hidden, hidden, y + e.slots[j] * hidden);
        }, per_copy);
    }
}

void expert_group(const GluSpec& act, std::span<const GroupExpert> experts, const float* x, int64_t top_k,
                  int64_t hidden, float* y, float* scratch, ExecContext& ctx) {
    phase_times::Scope timed(phase_times::kMatmul);
    if (ctx.backend() == Backend::Cuda) {  // the whole group in one call on the card (ops/cuda/expert_group.cu)
        check_group(experts, hidden);
        std::vector<cuda::GroupMember> g;
        g.reserve(experts.size());
        for (const GroupExpert& e : experts) {
            g.push_back({e.gate, e.up, e.down, e.slots, e.m});
            phase_times::add_matmul_flops(2.0 * double(e.m) * double(e.gate->rows) * double(hidden) * 3.0);
        }
        const cuda::GroupActivation a{act.kind == GluSpec::Kind::Situ ? 1 : act.kind == GluSpec::Kind::ClampedSwiglu ? 2 : 0,
                                      act.beta, act.linear_beta, act.alpha, act.limit};
        cuda::expert_group(a, g.data(), int64_t(g.size()), x, top_k, hidden, y, &ctx.pool());
        return;
    }
    cpu::expert_group(act, experts, x, top_k, hidden, y, scratch, ctx.pool());
}

}  // namespace sluice::ops
