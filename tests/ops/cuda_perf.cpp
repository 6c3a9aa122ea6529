// op_harness --perf (tests/ops/op_harness.cpp): the CUDA kernels timed against the card's own measured limits (HBM
// copy rate, pinned host-to-device rate, HBM read rate), one table.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "harness_util.h"
#include "core/stable_memory.h"
#include "ops/cuda/backend.h"
#include "ops/exec_context.h"
#include "ops/moe_ops.h"
#include "ops/ops.h"
#include "ops/quantize.h"

using namespace sluice;

namespace {

struct Shape {
    int64_t rows, cols, n;
};

// ---- --perf: the CUDA kernels against the card's own limits ----

double hbm_copy_gbps() {
    const uint64_t bytes = uint64_t(2) << 30;
    void* a = cuda::device_alloc(bytes);
    void* b = cuda::device_alloc(bytes);
    auto ev = cuda::event_pair();
    cuda::device_copy_async(b, a, bytes);  // warm-up
    std::vector<double> gbps;
    for (int i = 0; i < 5; ++i) {
        cuda::record(ev.start);
        cuda::device_copy_async(b, a, bytes);
        cuda::record(ev.stop);
        gbps.push_back(2.0 * double(bytes) / (cuda::elapsed_ms(ev) * 1e6));  // read + write
    }
    cuda::destroy(ev);
    cuda::device_free(a);
    cuda::device_free(b);
    std::sort(gbps.begin(), gbps.end());
    return gbps[gbps.size() / 2];
}

double h2d_gbps(bool pinned, uint64_t bytes) {
    std::vector<uint8_t> pageable;
    void* src = nullptr;
    if (pinned) {
        src = cuda::host_alloc_pinned(bytes);
    } else {
        pageable.assign(bytes, 1);
        src = pageable.data();
    }
    std::memset(src, 1, bytes);
    void* dst = cuda::device_alloc(bytes);
    auto ev = cuda::event_pair();
    std::vector<double> r;
    for (int i = 0; i < 6; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        cuda::copy_to_device_async(dst, src, bytes);
        cuda::synchronize();
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (i > 0) r.push_back(double(bytes) / (ms * 1e6));
    }
    cuda::destroy(ev);
    cuda::device_free(dst);
    if (pinned) cuda::host_free_pinned(src);
    std::sort(r.begin(), r.end());
    return r[r.size() / 2];
}

struct DeviceWeights {  // several copies of one weight on the device, so timed runs do not re-read L2
    std::vector<Weight> w;
    std::vector<void*> mem;
    DeviceWeights(const QuantizedWeight& q, int copies) {
        for (int i = 0; i < copies; ++i) {
            void* d = cuda::device_alloc(q.data.size());
            cuda::copy_to_device(d, q.data.data(), q.data.size());
            void* s = nullptr;
            if (!q.scales.empty()) {
                s = cuda::device_alloc(q.scales.size());
                cuda::copy_to_device(s, q.scales.data(), q.scales.size());
            }
            Weight v = q.view();
            v.data = static_cast<const uint8_t*>(d);
            v.scales = static_cast<const uint8_t*>(s);
            w.push_back(v);
            mem.push_back(d);
            if (s) mem.push_back(s);
        }
    }
    ~DeviceWeights() {
        for (void* p : mem) cuda::device_free(p);
    }
};

// Milliseconds of one matmul: as the engine calls it (host launches back to back, median of 5 loops of `reps`) and
// the kernels' own time (the same calls replayed from a CUDA graph), cycling through the copies.
struct Timing {
    double launched_ms, graph_ms;
};
Timing time_matmul(const DeviceWeights& dw, const float* xd, int64_t n, float* yd, int reps) {
    auto ev = cuda::event_pair();
    for (const auto& w : dw.w) cuda::matmul_device(w, xd, n, yd);  // warm-up; makes the work buffers
    std::vector<double> ms;
    for (int r = 0; r < 5; ++r) {
        cuda::record(ev.start);
        for (int i = 0; i < reps; ++i) cuda::matmul_device(dw.w[size_t(i) % dw.w.size()], xd, n, yd);
        cuda::record(ev.stop);
        ms.push_back(cuda::elapsed_ms(ev) / reps);
    }
    cuda::destroy(ev);
    std::sort(ms.begin(), ms.end());
    int i = 0;
    const double graph = cuda::graph_ms_per_call([&] { cuda::matmul_device(dw.w[size_t(i++) % dw.w.size()], xd, n, yd); },
                                                 reps);
    return {ms[ms.size() / 2], graph};
}

// A K3 MoE layer's routed experts (16 of gate/up [2048, 7168] and down [7168, 2048]) for n rows that all take every
// one of them, as ops::expert_group runs them on the card (one call: the gate/up launch, the activation, the down
// launch) and as three ops::matmul calls an expert did before: the weights kept on the card (each expert's bytes
// registered as a stable range, placed once in the warm-up), x and y in host memory. Kernel time is the card's
// timeline of the group's launches (cuda::Stats::kernel_ms); call time is the host's, copies and waits included.
void perf_expert_group(std::mt19937& rng, double read_gbps) {
    constexpr int64_t kExperts = 16, kHidden = 7168, kInter = 2048;
    std::printf("\n%-14s %5s %12s %12s %8s %14s %s\n", "expert group", "rows", "kernels ms", "call ms", "GB/s",
                "one by one ms", "share (kernels)");
    ExecContext gpu(0, ops::Backend::Cuda);  // every core, as the engine's pool (the outputs' copy to their slots)
    for (auto f : {WeightFormat::MXFP4, WeightFormat::BF16, WeightFormat::INT4_G32}) {
        const auto gw = random_vec(kInter * kHidden, rng, 0.05f), dw = random_vec(kHidden * kInter, rng, 0.05f);
        const QuantizedWeight gq = quantize(gw.data(), kInter, kHidden, f), dq = quantize(dw.data(), kHidden, kInter, f);
        // each expert its own bytes (distinct device copies), registered as stable so the card keeps them
        std::vector<std::vector<uint8_t>> bytes;
        std::vector<uint64_t> ids;
        std::vector<Weight> w;
        w.reserve(size_t(3 * kExperts));
        bytes.reserve(size_t(6 * kExperts));
        for (int64_t e = 0; e < kExperts; ++e)
            for (const QuantizedWeight* q : {&gq, &gq, &dq}) {
                bytes.push_back(q->data);
                bytes.push_back(q->scales);
                Weight v = q->view();
                v.data = bytes[bytes.size() - 2].data();
                v.scales = q->scales.empty() ? nullptr : bytes.back().data();
                ids.push_back(stable_memory::add(v.data, q->data.size()));
                if (v.scales) ids.push_back(stable_memory::add(v.scales, q->scales.size()));
                w.push_back(v);
            }
        const uint64_t wbytes = uint64_t(kExperts) * (2 * (gq.data.size() + gq.scales.size()) + dq.data.size() + dq.scales.size());
        for (int64_t n : {1, 8, 64}) {
            std::vector<std::vector<int64_t>> slots(static_cast<size_t>(kExperts));
            std::vector<ops::GroupExpert> group;
            for (int64_t e = 0; e < kExperts; ++e) {
                for (int64_t r = 0; r < n; ++r) slots[size_t(e)].push_back(r * kExperts + e);
                group.push_back({&w[size_t(3 * e)], &w[size_t(3 * e + 1)], &w[size_t(3 * e + 2)], slots[size_t(e)].data(), n});
            }
            const auto x = random_vec(n * kHidden, rng);
            std::vector<float> y(size_t(n * kExperts * kHidden));
            std::vector<float> scratch(size_t(ops::expert_group_scratch_floats(n * kExperts, kHidden, kInter)));
            auto median_ms = [&](const std::function<void()>& call, int reps) {
                call();  // warm-up: places the weights
                std::vector<double> ms;
                for (int r = 0; r < reps; ++r) {
                    const auto t0 = std::chrono::steady_clock::now();
                    call();
                    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
                }
                std::sort(ms.begin(), ms.end());
                return ms[ms.size() / 2];
            };
            const auto k0 = cuda::stats();
            const double call_ms = median_ms([&] {
                ops::expert_group(ops::GluSpec{}, group, x.data(), kExperts, kHidden, y.data(), nullptr, gpu);
            }, 9);
            const auto k1 = cuda::stats();
            const double kernel_ms = (k1.kernel_ms - k0.kernel_ms) / 10.0;
            const double one_ms = median_ms([&] {
                ops::experts_one_by_one(ops::GluSpec{}, group, x.data(), kExperts, kHidden, y.data(), scratch.data(), gpu);
            }, 5);
            const double gbps = double(wbytes) / (kernel_ms * 1e6);
            std::printf("%-14s %5ld %12.4f %12.4f %8.0f %14.3f %.0f%% of HBM read\n",
                        std::string(weight_format_name(f)).c_str(), long(n), kernel_ms, call_ms, gbps, one_ms,
                        100 * gbps / read_gbps);
        }
        for (uint64_t id : ids) stable_memory::remove(id);
    }
}

}  // namespace

void perf(std::mt19937& rng) {
    if (g_perf_groups_only) return perf_expert_group(rng, cuda::measure_read_gbps(uint64_t(2) << 30));
    const auto info = cuda::device_info();
    const double hbm = hbm_copy_gbps();
    const double read = cuda::measure_read_gbps(uint64_t(2) << 30);
    const double h2d_pinned = h2d_gbps(true, uint64_t(256) << 20), h2d_pageable = h2d_gbps(false, uint64_t(256) << 20);
    std::printf("\n== CUDA perf on %s (%d SMs)\n", info.name.c_str(), info.sm_count);
    std::printf("HBM read %.0f GB/s (read probe); device copy %.0f GB/s (read + write); host-to-device pinned %.1f "
                "GB/s, pageable %.1f GB/s\n", read, hbm, h2d_pinned, h2d_pageable);
    std::printf("%-14s %-11s %6s %10s %10s %10s %9s %s\n", "format", "shape", "rows", "ms", "graph ms", "GB/s",
                "TFLOP/s", "share (graph)");
    // The K3 expert's matrices: gate/up [2048, 7168], down [7168, 2048].
    const Shape shapes[] = {{2048, 7168, 0}, {7168, 2048, 0}};
    for (auto f : {WeightFormat::BF16, WeightFormat::MXFP4, WeightFormat::INT4_G32, WeightFormat::FP8_E4M3_B128}) {
        for (const auto& s : shapes) {
            const auto wf = random_vec(s.rows * s.cols, rng, 0.05f);
            const QuantizedWeight q = quantize(wf.data(), s.rows, s.cols, f);
            const uint64_t wbytes = q.data.size() + q.scales.size();
            const int copies = int(std::max<uint64_t>(2, (uint64_t(256) << 20) / wbytes));
            DeviceWeights dw(q, copies);
            for (int64_t n : {1, 8, 512, 1024, 4096}) {
                const auto x = random_vec(n * s.cols, rng);
                float* xd = static_cast<float*>(cuda::device_alloc(x.size() * 4));
                float* yd = static_cast<float*>(cuda::device_alloc(uint64_t(n * s.rows) * 4));
                cuda::copy_to_device(xd, x.data(), x.size() * 4);
                const Timing tm = time_matmul(dw, xd, n, yd, n >= 512 ? 10 : 50);
                const double ms = tm.graph_ms;
                const double gbps = double(wbytes) / (ms * 1e6);
                const double tflops = 2.0 * double(n) * double(s.rows) * double(s.cols) / (ms * 1e9);
                const std::string share = n <= 8 ? cat(int(100 * gbps / read + 0.5), "% of HBM read")
                                                 : cat(tflops * 3, " TFLOP/s of bf16 products (3 per f32)");
                std::printf("%-14s %5ldx%-5ld %6ld %10.4f %10.4f %10.1f %9.2f %s\n",
                            std::string(weight_format_name(f)).c_str(), long(s.rows), long(s.cols), long(n),
                            tm.launched_ms, ms, gbps, tflops, share.c_str());
                cuda::device_free(xd);
                cuda::device_free(yd);
            }
        }
    }

    // Attention as the engine calls it (copies included): MLA's latents (K3/DeepSeek: 64 heads over one 576-wide
    // latent, 512 values) and a GQA layer (64 heads, 4 kv heads of 128), prefill chunks and a decode row.
    std::printf("\n%-22s %6s %6s %10s %9s\n", "attention", "rows", "keys", "ms", "TFLOP/s");
    struct A { const char* what; int64_t heads, kv, dk, dv, n, keys; bool vik; };
    const A as[] = {{"MLA 64x576/512", 64, 1, 576, 512, 512, 512, true}, {"MLA 64x576/512", 64, 1, 576, 512, 4096, 4096, true},
                    {"MLA 64x576/512", 64, 1, 576, 512, 1, 4096, true},  {"GQA 64/4x128", 64, 4, 128, 128, 4096, 4096, false},
                    {"GQA 64/4x128", 64, 4, 128, 128, 1, 4096, false}};
    for (const auto& t : as) {
        const auto kb = random_vec(t.keys * t.kv * t.dk, rng), vb = random_vec(t.keys * t.kv * t.dv, rng);
        const auto qv = random_vec(t.n * t.heads * t.dk, rng);
        std::vector<int64_t> pos(static_cast<size_t>(t.n));
        for (int64_t i = 0; i < t.n; ++i) pos[size_t(i)] = t.keys - t.n + i;
        std::vector<float> o(static_cast<size_t>(t.n * t.heads * t.dv));
        AttentionParams p;
        p.n_heads = t.heads;
        p.n_kv_heads = t.kv;
        p.head_dim_k = t.dk;
        p.head_dim_v = t.dv;
        p.scale = 0.04f;
        const auto kview = ops::RowView::contiguous(kb.data(), t.kv * t.dk);
        const auto vview = t.vik ? kview : ops::RowView::contiguous(vb.data(), t.kv * t.dv);
        const cuda::AttentionShape sh{p.n_heads, p.n_kv_heads, p.head_dim_k, p.head_dim_v, p.scale, nullptr, 0};
        const cuda::Rows kr{nullptr, kview.first, 0, kview.stride}, vr{nullptr, vview.first, 0, vview.stride};
        std::vector<double> ms;
        for (int r = 0; r < 4; ++r) {
            const auto t0 = std::chrono::steady_clock::now();
            cuda::attention(sh, qv.data(), t.n, pos.data(), kr, vr, o.data());
            ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(ms.begin(), ms.end());
        double pairs = 0;  // (query, key) pairs, causal
        for (int64_t i = 0; i < t.n; ++i) pairs += double(pos[size_t(i)] + 1);
        const double flops = 2.0 * pairs * double(t.heads) * double(t.dk + t.dv);
        std::printf("%-22s %6ld %6ld %10.3f %9.2f\n", t.what, long(t.n), long(t.keys), ms[1], flops / (ms[1] * 1e9));
    }
    std::printf("(the share of the bf16 tensor peak needs the peak measured beside it: scripts/gpu-check.sh prints "
                "one from PyTorch when it is there)\n");
    perf_expert_group(rng, read);
}
