// ops::expert_group on the card (backend.h: expert_group). One call: x's rows up, each expert's rows gathered on
// the card, all the gate and up products in one launch per tile kind, the activation, all the down products, the
// outputs down once and scattered to their slots on the host. The alternative it replaced, three ops::matmul calls
// per expert with the activation on the host, paid a copy up, a copy down and a wait per matrix: for a decode step
// of a K3 layer 48 round trips, each longer than the product itself.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/cuda/backend.h"
#include "ops/cuda/backend_state.cuh"
#include "ops/cuda/matmul_kernels.cuh"

namespace sluice::cuda {

using namespace detail;

namespace {

unsigned grid_of(int64_t count, int threads) {
    const int64_t b = (count + threads - 1) / threads;
    return unsigned(std::clamp<int64_t>(b, 1, 65535 * 8));
}

__global__ void gather_rows_kernel(const float* __restrict__ x, const int64_t* __restrict__ row_of, int64_t rows,
                                   int64_t width, float* __restrict__ out) {
    const int64_t count = rows * width;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = i / width;
        out[i] = x[row_of[r] * width + (i - r * width)];
    }
}

// The activations of ops::glu (moe_ops.h), in the card's own exp and tanh (a few ulp from the host's: the same
// function for every group, so no row's bits depend on which group it was in). NaN passes through as on the host
// (std::min and std::clamp keep a NaN first argument; fminf would not).
__device__ __forceinline__ float activate(const GroupActivation& a, float g, float u) {
    if (a.kind == 1) return (a.beta * tanhf(g / a.beta) / (1.0f + expf(-g))) * (a.linear_beta * tanhf(u / a.linear_beta));
    if (a.kind == 2) {
        const float gc = a.limit < g ? a.limit : g;
        const float uc = u < -a.limit ? -a.limit : (a.limit < u ? a.limit : u);
        const float sg = gc * (1.0f / (1.0f + expf(-gc * a.alpha)));
        return (uc + 1.0f) * sg;
    }
    return g / (1.0f + expf(-g)) * u;
}

__global__ void glu_kernel(GroupActivation a, const float* __restrict__ gate, const float* __restrict__ up,
                           int64_t count, float* __restrict__ out) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
        out[i] = activate(a, gate[i], up[i]);
}

// The events a group records on the card's timeline (made at first use, reused under the backend's lock).
std::vector<cudaEvent_t>& group_events(size_t need) {
    static std::vector<cudaEvent_t> ev;
    while (ev.size() < need) {
        cudaEvent_t e;
        CK(cudaEventCreate(&e));
        ev.push_back(e);
    }
    return ev;
}

struct Placed {
    kernels::WDesc gate, up, down;
};

// A wave's activations in the group buffer, for `rows` rows (byte offsets; each part 256-byte aligned): the gathered
// rows, gate and up outputs [2][rows][inter], the activation, the outputs, the split parts, the split sums.
struct WaveLayout {
    uint64_t xg = 0, gu = 0, h = 0, yo = 0, xs = 0, part = 0, bytes = 0;
};
WaveLayout wave_layout(int64_t rows, int64_t hidden, int64_t inter, bool split, uint64_t part_bytes) {
    WaveLayout L;
    uint64_t at = 0;
    auto take = [&](uint64_t bytes) {
        const uint64_t p = at;
        at = align_up(at + bytes, 256);
        return p;
    };
    L.xg = take(uint64_t(rows * hidden) * 4);
    L.gu = take(uint64_t(2 * rows * inter) * 4);
    L.h = take(uint64_t(rows * inter) * 4);
    L.yo = take(uint64_t(rows * hidden) * 4);
    L.xs = take(split ? uint64_t(std::max(hidden, inter) * rows) * 6 : 0);
    L.part = take(part_bytes);
    L.bytes = at;
    return L;
}

// A stage's products (the jobs of one wave's gate/up, or its down) as launches: runs of one format and tile kind,
// tensor-core formats first; the others (plain FMAs) one call each, after the split sums are added.
struct Run {
    int64_t start, count, blocks;
    int format, kind;
};
struct StagePlan {
    std::vector<Run> runs;
    std::vector<int64_t> ffma;
};

StagePlan plan_stage(kernels::GroupJob* js, int64_t n) {
    auto mma = [](const kernels::GroupJob& j) { return uses_mma(WeightFormat(j.w.format), j.w.cols); };
    auto kind = [](const kernels::GroupJob& j) { return kernels::tile_for(j.w.format, j.n).kind; };
    std::stable_sort(js, js + n, [&](const kernels::GroupJob& a, const kernels::GroupJob& c) {
        if (mma(a) != mma(c)) return mma(a);
        if (a.w.format != c.w.format) return a.w.format < c.w.format;
        return kind(a) < kind(c);
    });
    StagePlan p;
    for (int64_t a = 0; a < n;) {
        if (!mma(js[a])) {
            p.ffma.push_back(a++);
            continue;
        }
        Run r{a, 0, 0, js[a].w.format, kind(js[a])};
        for (; a < n && mma(js[a]) && js[a].w.format == r.format && kind(js[a]) == r.kind; ++a) {
            const kernels::Tile t = kernels::tile_for(r.format, js[a].n);
            js[a].first_block = r.blocks;
            js[a].row_blocks = (js[a].w.rows + t.block_rows - 1) / t.block_rows;
            r.blocks += js[a].row_blocks * ((js[a].n + t.block_n - 1) / t.block_n);
        }
        r.count = a - r.start;
        p.runs.push_back(r);
    }
    return p;
}

// Whether every tensor-core product of the stage reads nibble pairs: its rows are split in that order then (else in
// natural order, which a nibble format's kernel re-pairs as it loads them: the same bits, a few more instructions).
bool stage_nibble(const StagePlan& p) {
    bool any = false;
    for (const Run& r : p.runs) {
        if (!kernels::nibble_pairs(r.format)) return false;
        any = true;
    }
    return any;
}

void launch_runs(const StagePlan& p, const kernels::GroupJob* jobs_dev, int64_t plane, int64_t part_stride,
                 int splits, int64_t per_split, int split_index, cudaStream_t s) {
    const bool nibble = stage_nibble(p);
    for (const Run& r : p.runs)
        kernels::grouped_mma(r.format, r.kind, {jobs_dev + r.start, int(r.count), r.blocks, plane, nibble, part_stride,
                                                splits, per_split, split_index}, s);
}

}  // namespace

void expert_group(const GroupActivation& act, const GroupMember* experts, int64_t count, const float* x,
                  int64_t top_k, int64_t hidden, float* y, ThreadPool* pool) {
    SLUICE_CHECK(count >= 0 && top_k > 0 && hidden > 0, "expert_group: bad arguments (", count, " experts, top_k ",
                 top_k, ", hidden ", hidden, ")");
    std::vector<const GroupMember*> ex;
    for (int64_t e = 0; e < count; ++e)
        if (experts[e].m > 0) ex.push_back(&experts[e]);
    if (ex.empty()) return;
    for (const GroupMember* e : ex) {
        SLUICE_CHECK(e->gate && e->up && e->down && e->slots,
                     "expert_group: an expert without its gate, up or down matrix or its slots");
        for (const Weight* w : {e->gate, e->up, e->down}) check_weight(*w);
    }
    const int64_t inter = ex[0]->gate->rows;
    int64_t M = 0, n_rows = 0;
    std::vector<int64_t> off;
    for (const GroupMember* e : ex) {
        SLUICE_CHECK(e->gate->rows == inter && e->gate->cols == hidden && e->up->rows == inter &&
                         e->up->cols == hidden && e->down->rows == hidden && e->down->cols == inter,
                     "expert_group on the card: every expert's gate and up must be [", inter, ", ", hidden,
                     "] and down [", hidden, ", ", inter, "]; got gate [", e->gate->rows, ", ", e->gate->cols,
                     "], up [", e->up->rows, ", ", e->up->cols, "], down [", e->down->rows, ", ", e->down->cols, "]");
        for (int64_t j = 0; j < e->m; ++j) {
            SLUICE_CHECK(e->slots[j] >= 0, "expert_group: negative slot ", e->slots[j]);
            n_rows = std::max(n_rows, e->slots[j] / top_k + 1);
        }
        off.push_back(M);
        M += e->m;
    }
    off.push_back(M);
    const int64_t E = int64_t(ex.size());
    int64_t max_m = 0;
    bool split = false;  // some product runs on the tensor cores: they read the split_x parts (grouped_mma)
    for (const GroupMember* e : ex) {
        max_m = std::max(max_m, e->m);
        split = split || uses_mma(e->gate->format, hidden) || uses_mma(e->down->format, inter);
    }
    const int s1 = k_splits(inter, hidden), s2 = k_splits(hidden, inter);
    const int64_t per1 = ((hidden + kernels::kChunkCols - 1) / kernels::kChunkCols + s1 - 1) / s1;
    const int64_t per2 = ((inter + kernels::kChunkCols - 1) / kernels::kChunkCols + s2 - 1) / s2;
    uint64_t expert_bytes = 0;  // the most one expert's copies take in the arena
    for (const GroupMember* e : ex) {
        uint64_t t = 0;
        for (const Weight* w : {e->gate, e->up, e->down})
            t += align_up(align_up(w->data_bytes(), 256) + (w->scales ? w->scale_bytes() : 0), 256);
        expert_bytes = std::max(expert_bytes, t);
    }

    auto& b = backend();
    std::lock_guard lock(b.mu);
    const auto t0 = std::chrono::steady_clock::now();
    // A wave takes experts while its rows stay within cap (an expert with more rows goes alone): its buffers take a
    // quarter of the room the other work buffers leave in the budget at most (a prefill chunk's group of 16 experts
    // of 4096 rows would otherwise want tens of GB). The split sums get a buffer of their own when it is small (a
    // sixteenth of the room, 256 MiB at most); otherwise each split is its own launch, adding to the output.
    const uint64_t others = b.workspace_bytes() - b.group_buf_.bytes;
    const uint64_t room = b.budget() > others ? b.budget() - others : 0;
    const uint64_t per_row = uint64_t(hidden) * 8 + uint64_t(inter) * 12 + (split ? uint64_t(std::max(hidden, inter)) * 6 : 0);
    const int64_t cap = std::max(max_m, std::min<int64_t>(M, std::max<int64_t>(64, int64_t(room / 4 / per_row))));
    const uint64_t part_need = s1 > 1 || s2 > 1 ? uint64_t(std::max(s1 * 2 * cap * inter, s2 * cap * hidden)) * 4 : 0;
    const uint64_t part_bytes = part_need <= std::min(uint64_t(256) << 20, room / 16) ? part_need : 0;
    const WaveLayout W = wave_layout(cap, hidden, inter, split, part_bytes);
    const uint64_t xin_at = W.bytes, row_of_at = align_up(xin_at + uint64_t(n_rows * hidden) * 4, 256);
    const uint64_t jobs_at = align_up(row_of_at + uint64_t(M) * 8, 256);
    const uint64_t group_bytes = jobs_at + uint64_t(3 * E) * sizeof(kernels::GroupJob);
    // the work buffers first (growing one may evict kept copies), then the weights
    b.grow(b.group_buf_, group_bytes, "an expert group's activations");
    b.grow(b.transient_, expert_bytes, "an expert's weights copied for this call");
    auto* base = static_cast<uint8_t*>(b.group_buf_.p);
    auto fp = [&](uint64_t o) { return reinterpret_cast<float*>(base + o); };
    float *xin = fp(xin_at), *xg = fp(W.xg), *gu = fp(W.gu), *h = fp(W.h), *yo = fp(W.yo), *part = fp(W.part);
    auto* xs = reinterpret_cast<__nv_bfloat16*>(base + W.xs);
    auto* row_of_dev = reinterpret_cast<int64_t*>(base + row_of_at);
    auto* jobs_dev = reinterpret_cast<kernels::GroupJob*>(base + jobs_at);

    // host staging: x (when it is not page-locked), row_of and the jobs as laid out on the card; a wave's outputs
    const uint64_t x_bytes = uint64_t(n_rows * hidden) * 4, meta_bytes = group_bytes - row_of_at;
    const bool x_direct = b.is_pinned(x, x_bytes);
    auto* stage = static_cast<uint8_t*>(b.pinned((x_direct ? 0 : x_bytes) + meta_bytes + uint64_t(cap * hidden) * 4));
    uint8_t* meta = stage + (x_direct ? 0 : x_bytes);
    float* out_host = reinterpret_cast<float*>(meta + meta_bytes);
    auto* row_of = reinterpret_cast<int64_t*>(meta);
    auto* jobs = reinterpret_cast<kernels::GroupJob*>(meta + (jobs_at - row_of_at));
    for (int64_t e = 0; e < E; ++e)
        for (int64_t j = 0; j < ex[size_t(e)]->m; ++j) row_of[off[size_t(e)] + j] = ex[size_t(e)]->slots[j] / top_k;

    const cudaStream_t s = b.stream();
    auto& ev = group_events(5);
    auto elapsed = [&](int a, int c) {
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, ev[size_t(a)], ev[size_t(c)]));
        return double(ms);
    };
    CK(cudaEventRecord(ev[0], s));
    if (!x_direct) std::memcpy(stage, x, x_bytes);
    CK(cudaMemcpyAsync(xin, x_direct ? static_cast<const void*>(x) : stage, x_bytes, cudaMemcpyHostToDevice, s));
    CK(cudaMemcpyAsync(row_of_dev, row_of, uint64_t(M) * 8, cudaMemcpyHostToDevice, s));
    CK(cudaEventRecord(ev[1], s));
    CK(cudaEventSynchronize(ev[1]));
    double copy_ms = elapsed(0, 1), place_ms = 0, kernel_ms = 0;

    // One stage's products for a wave: parallel splits into `part` then added, or one launch per split adding to y.
    auto stage_products = [&](const StagePlan& p, const kernels::GroupJob* jd, int64_t plane, int64_t out_floats,
                              int splits, int64_t per_split, float* y_out) {
        if (splits == 1 || uint64_t(splits * out_floats) * 4 <= part_bytes) {
            launch_runs(p, jd, plane, out_floats, splits, per_split, -1, s);
            if (splits > 1) kernels::reduce_splits(part, splits, out_floats, y_out, out_floats, s);
        } else {
            for (int k = 0; k < splits; ++k) launch_runs(p, jd, plane, out_floats, splits, per_split, k, s);
            b.stats.group_serial_stages++;
        }
    };

    int64_t waves = 0;
    std::vector<Placed> placed(static_cast<size_t>(E));
    for (int64_t w0 = 0; w0 < E;) {
        CK(cudaEventRecord(ev[1], s));  // the wave's placing starts here
        b.open_group();
        Arena arena{static_cast<uint8_t*>(b.transient_.p), b.transient_.bytes, 0};
        int64_t w1 = w0;
        while (w1 < E && (w1 == w0 || off[size_t(w1) + 1] - off[size_t(w0)] <= cap)) {
            const GroupMember* e = ex[size_t(w1)];
            Placed p{b.place(*e->gate, &arena), b.place(*e->up, &arena), b.place(*e->down, &arena)};
            if (!p.gate.data || !p.up.data || !p.down.data) break;
            placed[size_t(w1++)] = p;
        }
        if (w1 == w0) {
            b.close_group();
            fail("CUDA: one expert's weights (", expert_bytes, " bytes) do not fit the card beside the work buffers "
                 "(--gpu-memory ", b.budget(), " bytes); give more, or use --device cpu");
        }
        CK(cudaEventRecord(ev[2], s));
        ++waves;
        const int64_t k = w1 - w0, r0 = off[size_t(w0)], R = off[size_t(w1)] - r0;
        // the wave's jobs: 2k gate/up products, then k down products, at [3 w0, 3 w1) of the jobs array; pointers
        // into the wave's buffers (row o - r0 of the wave)
        kernels::GroupJob* j1 = jobs + 3 * w0;
        kernels::GroupJob* j2 = j1 + 2 * k;
        for (int64_t i = 0; i < k; ++i) {
            const int64_t e = w0 + i, o = off[size_t(e)] - r0, m = ex[size_t(e)]->m;
            const Placed& p = placed[size_t(e)];
            j1[2 * i] = {p.gate, xg + o * hidden, xs + o * hidden, gu + o * inter, part + o * inter, m, 0, 0};
            j1[2 * i + 1] = {p.up, xg + o * hidden, xs + o * hidden, gu + (R + o) * inter, part + (R + o) * inter, m, 0, 0};
            j2[i] = {p.down, h + o * inter, xs + o * inter, yo + o * hidden, part + o * hidden, m, 0, 0};
        }
        const StagePlan p1 = plan_stage(j1, 2 * k), p2 = plan_stage(j2, k);
        CK(cudaMemcpyAsync(jobs_dev + 3 * w0, j1, uint64_t(3 * k) * sizeof(kernels::GroupJob), cudaMemcpyHostToDevice, s));
        gather_rows_kernel<<<grid_of(R * hidden, 256), 256, 0, s>>>(xin, row_of_dev + r0, R, hidden, xg);
        if (split) kernels::split_x(xg, R * hidden, xs, R * hidden, stage_nibble(p1), s);
        stage_products(p1, jobs_dev + 3 * w0, R * hidden, 2 * R * inter, s1, per1, gu);
        for (int64_t a : p1.ffma) kernels::ffma_matmul(j1[a].w, j1[a].x, j1[a].n, j1[a].y, s);
        glu_kernel<<<grid_of(R * inter, 256), 256, 0, s>>>(act, gu, gu + R * inter, R * inter, h);
        if (split) kernels::split_x(h, R * inter, xs, R * inter, stage_nibble(p2), s);
        stage_products(p2, jobs_dev + 3 * w0 + 2 * k, R * inter, R * hidden, s2, per2, yo);
        for (int64_t a : p2.ffma) kernels::ffma_matmul(j2[a].w, j2[a].x, j2[a].n, j2[a].y, s);
        CK(cudaGetLastError());
        CK(cudaEventRecord(ev[3], s));
        CK(cudaMemcpyAsync(out_host, yo, uint64_t(R * hidden) * 4, cudaMemcpyDeviceToHost, s));
        CK(cudaEventRecord(ev[4], s));
        b.close_group();
        CK(cudaEventSynchronize(ev[4]));
        place_ms += elapsed(1, 2);
        kernel_ms += elapsed(2, 3);
        copy_ms += elapsed(3, 4);
        // the wave's rows to their slots: wave row i is expert e's row i - off[e] (experts in order)
        auto scatter = [&](int64_t i0, int64_t i1) {
            int64_t e = std::upper_bound(off.begin() + w0, off.begin() + w1 + 1, r0 + i0) - off.begin() - 1;
            for (int64_t i = i0; i < i1; ++i) {
                while (r0 + i >= off[size_t(e) + 1]) ++e;
                std::memcpy(y + ex[size_t(e)]->slots[r0 + i - off[size_t(e)]] * hidden, out_host + i * hidden,
                            size_t(hidden) * 4);
            }
        };
        if (pool && R * hidden >= (int64_t(1) << 20))
            pool->parallel_for(R, scatter, std::max<int64_t>(1, (int64_t(1) << 18) / hidden));
        else
            scatter(0, R);
        b.stats.d2h_bytes += uint64_t(R * hidden) * 4;
        w0 = w1;
    }
    b.stats.place_ms += place_ms;
    b.stats.kernel_ms += kernel_ms;
    b.stats.activation_copy_ms += copy_ms;
    b.stats.group_calls++;
    b.stats.group_waves += uint64_t(waves);
    b.stats.group_weights += uint64_t(3 * E);
    b.stats.h2d_bytes += x_bytes + meta_bytes;
    b.stats.group_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace sluice::cuda
