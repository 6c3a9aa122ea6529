#include "models/blocks/moe.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <numeric>

#include "core/error.h"
#include "core/phase_times.h"
#include "ops/elementwise.h"
#include "ops/ops.h"

namespace sluice {

void swiglu_forward(const SwigluWeights& w, const float* x, int64_t n, float* y, ExecContext& ctx,
                    const GluActivation& act) {
    const int64_t inter = w.gate.rows;
    ScratchArena::Scope scope(ctx.arena());
    float* g = ctx.arena().f32(n * inter);
    float* u = ctx.arena().f32(n * inter);
    ops::matmul(w.gate, x, n, g, ctx);
    ops::matmul(w.up, x, n, u, ctx);
    // elementwise, so the split over threads changes no bit; SiTU's tanh and exp are as costly as a small matmul
    ctx.pool().parallel_for(n * inter, [&](int64_t a, int64_t b) { ops::glu(act, g + a, u + a, 1, b - a, g + a); },
                            16384);
    ops::matmul(w.down, g, n, y, ctx);
}

uint64_t swiglu_scratch_bytes(int64_t n, int64_t inter) { return 2 * ScratchArena::f32_bytes(n * inter); }
uint64_t route_scratch_bytes(int64_t n, int64_t n_experts) { return ScratchArena::f32_bytes(n * n_experts); }
uint64_t moe_with_scratch_bytes(int64_t n, int64_t top_k, int64_t hidden, uint64_t expert_call_bytes,
                                uint64_t while_reading_bytes) {
    return ScratchArena::f32_bytes(n * top_k * hidden) + 2 * ScratchArena::f32_bytes(n * hidden) +
           std::max(expert_call_bytes, while_reading_bytes);
}
namespace {
// Most rows one expert_group call takes (the sum of its experts' rows): a decode step's or a small batch's whole
// layer (up to 64 rows), a prefill chunk's n rows (what the experts' scratch held when they ran one at a time).
int64_t group_rows(int64_t n, int64_t top_k) { return std::max(n, std::min<int64_t>(n * top_k, 64)); }
}  // namespace

uint64_t moe_scratch_bytes(int64_t n, int64_t top_k, int64_t hidden, int64_t inter, int64_t shared_inter,
                           uint64_t while_reading_bytes) {
    const uint64_t shared = shared_inter > 0 ? ScratchArena::f32_bytes(n * hidden) : 0;
    const uint64_t reading =
        std::max(while_reading_bytes, shared_inter > 0 ? swiglu_scratch_bytes(n, shared_inter) : uint64_t(0));
    const uint64_t group =
        ScratchArena::f32_bytes(ops::expert_group_scratch_floats(group_rows(n, top_k), hidden, inter));
    return shared + ScratchArena::f32_bytes(n * top_k * hidden) + std::max(group, reading);
}

namespace {
// Buffers of the calling thread that grow to their largest size once, so routing a pass allocates nothing after the
// first passes (the MLA and attention per-thread buffers' pattern). A pass runs on one thread at a time; the
// layer's routing and the look-ahead's guess, alive together, have one each.
thread_local Routing t_routing, t_guess;
thread_local std::vector<int32_t> t_guess_experts;

const Routing& route_with(const ops::RouterSpec& spec, const Weight& gate, const float* bias, const float* x, int64_t n,
                          ExecContext& ctx, Routing& r) {
    phase_times::Scope timed(phase_times::kRoute);
    ScratchArena::Scope scope(ctx.arena());
    float* logits = ctx.arena().f32(n * spec.n_experts);
    ops::matmul(gate, x, n, logits, ctx);
    r.top_k = spec.top_k;
    r.experts.resize(size_t(n * spec.top_k));
    r.weights.resize(size_t(n * spec.top_k));
    ops::route(spec, logits, bias, n, r.experts.data(), r.weights.data(), ctx.pool());
    return r;
}
ops::RouterSpec spec_of(const RouterParams& p, ops::RouterSpec::Scoring scoring) {
    return {scoring, p.n_experts, p.top_k, p.n_group, p.topk_group, p.norm_topk_prob, p.routed_scaling_factor};
}
}  // namespace

const Routing& route_sigmoid(const RouterParams& p, const Weight& gate, const std::vector<float>& bias, const float* x,
                             int64_t n, ExecContext& ctx) {
    return route_with(spec_of(p, ops::RouterSpec::Scoring::Sigmoid), gate, bias.empty() ? nullptr : bias.data(), x, n,
                      ctx, t_routing);
}

void prefetch_experts(ExpertSource& source, int64_t layer, const RouterParams& p, const Weight& gate,
                      const std::vector<float>& bias, const float* x, int64_t n, ExecContext& ctx) {
    const Routing& guess = route_with(spec_of(p, ops::RouterSpec::Scoring::Sigmoid), gate,
                                      bias.empty() ? nullptr : bias.data(), x, n, ctx, t_guess);
    std::vector<int32_t>& experts = t_guess_experts;
    experts.assign(guess.experts.begin(), guess.experts.end());
    std::sort(experts.begin(), experts.end());
    experts.erase(std::unique(experts.begin(), experts.end()), experts.end());
    source.prefetch(layer, experts);
}

const Routing& route_softmax(const RouterParams& p, const Weight& gate, const float* x, int64_t n, ExecContext& ctx) {
    return route_with(spec_of(p, ops::RouterSpec::Scoring::Softmax), gate, nullptr, x, n, ctx, t_routing);
}

namespace {
// A layer's experts and the (row, slot) pairs of each, by counting sort (ascending expert id, slots in order: what
// a map of expert -> slots gave); the calling thread's, grown once.
struct ExpertUsers {
    std::vector<int64_t> start;  // [max expert + 2]: expert e's slots are slots[start[e], start[e + 1])
    std::vector<int64_t> slots;  // row * K + k
    std::vector<int32_t> experts;
    std::vector<uint32_t> rows;
    void build(std::span<const int32_t> chosen) {
        const int32_t top = chosen.empty() ? 0 : *std::max_element(chosen.begin(), chosen.end());
        start.assign(size_t(top) + 2, 0);
        for (int32_t e : chosen) ++start[size_t(e) + 1];
        experts.clear();
        rows.clear();
        for (int32_t e = 0; e <= top; ++e)
            if (start[size_t(e) + 1] > 0) {
                experts.push_back(e);
                rows.push_back(uint32_t(start[size_t(e) + 1]));
            }
        std::partial_sum(start.begin(), start.end(), start.begin());
        slots.resize(chosen.size());
        for (size_t s = 0; s < chosen.size(); ++s) slots[size_t(start[size_t(chosen[s])]++)] = int64_t(s);
        // start[e] now ends expert e's slots: shift back so it begins them
        for (size_t e = start.size() - 1; e > 0; --e) start[e] = start[e - 1];
        start[0] = 0;
    }
    std::span<const int64_t> of(int32_t e) const {
        return {slots.data() + start[size_t(e)], size_t(start[size_t(e) + 1] - start[size_t(e)])};
    }
};
thread_local ExpertUsers t_users;
}  // namespace

namespace {
// What every MoE layer does before its experts: the union of the experts the rows chose and the (row, slot) pairs
// of each (in the calling thread's buffers: the callbacks of the fetch may run on other threads and use them
// through the reference), noted to the source.
const ExpertUsers& users_of(int64_t layer, const Routing& routing, ExpertSource& source, int64_t n) {
    ExpertUsers& users = t_users;
    users.build(std::span<const int32_t>(routing.experts.data(), size_t(n * routing.top_k)));
    source.note_use(layer, users.experts, users.rows, routing.experts, routing.top_k);
    return users;
}
// ... and after them: the combine in the fixed order, and the statistics.
void combine(const Routing& routing, const ExpertUsers& users, const float* y_slots, int64_t n, int64_t hidden,
             float* out, ThreadPool& pool, MoeStats* stats) {
    ops::moe_combine(y_slots, routing.weights.data(), n, routing.top_k, hidden, out, pool);
    if (stats) {
        stats->rows += uint64_t(n);
        stats->expert_rows += uint64_t(n * routing.top_k);
        stats->distinct_experts += users.experts.size();
    }
}
thread_local std::vector<ops::GroupExpert> t_group;  // the calling thread's, grown once
}  // namespace

void moe_forward_with(int64_t layer, const Routing& routing, ExpertSource& source, ExpertFn expert_fn,
                      const float* x, int64_t n, int64_t hidden, float* out, ExecContext& ctx,
                      MoeStats* stats, FunctionRef<void()> while_reading) {
    phase_times::Scope timed(phase_times::kMoe);
    ThreadPool& pool = ctx.pool();
    ScratchArena& arena = ctx.arena();
    const int64_t K = routing.top_k;
    const ExpertUsers& users = users_of(layer, routing, source, n);
    const std::vector<int32_t>& experts = users.experts;

    ScratchArena::Scope scope(arena);
    // every slot is written by the expert its row chose (each row's top_k experts are distinct) before the combine
    float* y_slots = arena.f32(n * K * hidden);
    float* xs = arena.f32(n * hidden);  // one expert's rows: at most n (a row picks an expert once)
    float* ys = arena.f32(n * hidden);
    // a prefill chunk's gather and scatter are tens of MB an expert: split over the pool (copies: bits unchanged)
    const int64_t min_rows = std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(1, hidden));
    source.fetch(layer, experts, [&](size_t i, const ExpertWeights& w) {
        const std::span<const int64_t> slots = users.of(experts[i]);
        const int64_t m = int64_t(slots.size());
        pool.parallel_for(m, [&](int64_t j0, int64_t j1) {
            for (int64_t j = j0; j < j1; ++j) std::copy_n(x + (slots[size_t(j)] / K) * hidden, hidden, xs + j * hidden);
        }, min_rows);
        expert_fn(experts[i], w, xs, m, ys);
        pool.parallel_for(m, [&](int64_t j0, int64_t j1) {
            for (int64_t j = j0; j < j1; ++j) std::copy_n(ys + j * hidden, hidden, y_slots + slots[size_t(j)] * hidden);
        }, min_rows);
    }, while_reading);
    combine(routing, users, y_slots, n, hidden, out, pool, stats);
}

void moe_forward(int64_t layer, const Routing& routing, ExpertSource& source, const SwigluWeights* shared,
                 const float* x, int64_t n, int64_t hidden, float* out, ExecContext& ctx,
                 MoeStats* stats, const GluActivation& act, FunctionRef<void()> while_reading) {
    ScratchArena& arena = ctx.arena();
    ScratchArena::Scope scope(arena);
    float* s = shared ? arena.f32(n * hidden) : nullptr;
    {
        phase_times::Scope timed(phase_times::kMoe);
        const int64_t K = routing.top_k;
        const ExpertUsers& users = users_of(layer, routing, source, n);
        ScratchArena::Scope slots_scope(arena);
        // every slot is written by the expert its row chose (each row's top_k experts are distinct) before the
        // combine
        float* y_slots = arena.f32(n * K * hidden);
        const int64_t cap = group_rows(n, K);
        // The experts resident at once (the cached ones, then each batch of arrivals) run as one expert_group call,
        // or several when their rows pass cap; a slot's bits do not depend on the grouping.
        source.fetch_groups(layer, users.experts, [&](std::span<const ReadyExpert> ready) {
            const int64_t inter = ready.front().w.gate.rows;
            ScratchArena::Scope group_scope(arena);
            // carved for cap rows, so the high-water mark does not depend on the routing
            float* scratch = arena.f32(ops::expert_group_scratch_floats(cap, hidden, inter));
            std::vector<ops::GroupExpert>& group = t_group;
            group.clear();
            int64_t rows = 0;
            auto run = [&] {
                ops::expert_group(act, group, x, K, hidden, y_slots, scratch, ctx);
                group.clear();
                rows = 0;
            };
            for (const ReadyExpert& r : ready) {
                const int32_t e = users.experts[r.i];
                SLUICE_CHECK(r.w.gate.cols == hidden && r.w.down.rows == hidden && r.w.gate.rows == inter,
                             "layer ", layer, " expert ", e, ": weight shapes do not match hidden size ", hidden,
                             " and the layer's intermediate size ", inter);
                const std::span<const int64_t> slots = users.of(e);
                const int64_t m = int64_t(slots.size());
                if (rows + m > cap) run();
                group.push_back({&r.w.gate, &r.w.up, &r.w.down, slots.data(), m});
                rows += m;
            }
            run();
        }, [&] {
            if (while_reading) while_reading();
            if (shared) swiglu_forward(*shared, x, n, s, ctx, act);
        });
        combine(routing, users, y_slots, n, hidden, out, ctx.pool(), stats);
    }
    if (shared) ops::add(out, s, n * hidden, out);
}

void sigmoid_moe_ffn_forward(int64_t layer, const SigmoidMoeFfn& ffn, const SigmoidMoeFfn* next, bool look_ahead,
                             const RouterParams& p, ExpertSource& source, const float* x, int64_t n, int64_t hidden,
                             float* y, ExecContext& ctx) {
    auto hint_next = [&] {
        if (look_ahead && next && next->moe)
            prefetch_experts(source, layer + 1, p, next->router, next->router_bias, x, n, ctx);
    };
    if (!ffn.moe) {  // a dense layer before the first MoE layer: its MLP's time is the drive's to read that layer
        hint_next();
        return swiglu_forward(ffn.mlp, x, n, y, ctx);
    }
    const Routing& r = route_sigmoid(p, ffn.router, ffn.router_bias, x, n, ctx);
    moe_forward(layer, r, source, ffn.has_shared ? &ffn.shared : nullptr, x, n, hidden, y, ctx, nullptr, {},
                hint_next);
}

uint64_t sigmoid_moe_ffn_scratch_bytes(int64_t n, bool moe, const RouterParams& p, int64_t hidden, int64_t dense_inter,
                                       int64_t moe_inter, int64_t shared_inter, int64_t look_ahead_experts) {
    const uint64_t hint = look_ahead_experts > 0 ? route_scratch_bytes(n, look_ahead_experts) : 0;
    if (!moe) return std::max(swiglu_scratch_bytes(n, dense_inter), hint);
    return std::max(route_scratch_bytes(n, p.n_experts),
                    moe_scratch_bytes(n, p.top_k, hidden, moe_inter, shared_inter, hint));
}

}  // namespace sluice
