// The op harness across backends, in the style of ggml's test-backend-ops: every weight matmul format, and attention
// (grouped, multi-query with MLA's shared latents, sinks, windows, paged caches), on every backend this machine has;
// the MoE ops (routing, gated activations, combine), MLA's absorption, RoPE's rotation and KDA's delta rule on the CPU,
// where they run (the CPU's active path, and CUDA when a device is usable), against the ops::ref oracle
// over odd and real shapes, with fresh random inputs per check and a NaN-poisoned output (every element must be
// written); then the properties exactness rests on: a row's bits do not depend on the other rows of the batch, on
// CUDA a kept device copy gives the same bits as a per-call copy, and a CPU path that promises the portable path's
// bits (NEON) gives them: every format and shape, and every F16/BF16 bit pattern, FP8 code and E8M0 scale.
//   op_harness            checks; exit 1 on the first failure, "N passed, 0 failed" at the end
//   op_harness --perf     also times the CUDA kernels against the card's measured limits (HBM copy rate, pinned
//                         host-to-device rate) and prints one table
//   op_harness --backend cpu|cuda   only that backend
//   op_harness --small    only the matmul shapes up to 8M multiply-adds (11 of the 15, the odd ones all kept), for
//                         an emulator such as qemu-user, where the largest take minutes
// (tests/unit/test_ops.cpp holds the per-CPU-path checks of every op; this program is where backends meet.)
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
#include "core/stable_memory.h"
#include "core/thread_pool.h"
#include "ops/cuda/backend.h"
#include "ops/mla_ops.h"
#include "ops/moe_ops.h"
#include "ops/ops.h"
#include "ops/quantize.h"
#include "ops/rope.h"
#include "harness_util.h"

using namespace sluice;

int64_t g_max_work = INT64_MAX;  // --small: matmul shapes with rows * cols * n above this are skipped

namespace {

const WeightFormat kFormats[] = {WeightFormat::F32, WeightFormat::F16, WeightFormat::BF16,
                                 WeightFormat::FP8_E4M3_B128, WeightFormat::MXFP4, WeightFormat::INT4_G32};

struct Shape {
    int64_t rows, cols, n;
};
const Shape kShapes[] = {{1, 32, 1},     {15, 96, 3},     {16, 128, 8},    {17, 160, 9},     {100, 544, 33},
                         {256, 1024, 1}, {257, 4096, 17}, {64, 7168, 64},  {300, 2048, 300}, {33, 256, 4096},
                         {2048, 512, 2}, {130, 384, 130}, {48, 32, 1000}, {24, 80, 5},   {40, 200, 7}};

using MatmulFn = std::function<void(const Weight&, const float*, int64_t, float*)>;

// |y - ref| <= 1e-5 * sum_c |w x| for every element, every element written.
bool check_against_ref(const Weight& w, const std::vector<float>& x, int64_t n, const std::vector<float>& y,
                       std::string& why) {
    std::vector<float> ref(static_cast<size_t>(n * w.rows)), row(static_cast<size_t>(w.cols));
    ops::ref::matmul(w, x.data(), n, ref.data());
    for (int64_t r = 0; r < w.rows; ++r) {
        ops::ref::dequantize_row(w, r, row.data());
        for (int64_t i = 0; i < n; ++i) {
            double mag = 0;
            for (int64_t c = 0; c < w.cols; ++c) mag += std::fabs(double(row[size_t(c)]) * x[size_t(i * w.cols + c)]);
            const float got = y[size_t(i * w.rows + r)], want = ref[size_t(i * w.rows + r)];
            if (!std::isfinite(got) || std::fabs(double(got) - want) > 1e-5 * mag + 1e-30) {
                why = cat("row ", r, " of x row ", i, ": got ", got, ", want ", want, " (sum|wx| ", mag, ")");
                return false;
            }
        }
    }
    return true;
}


void check_backend(const char* name, const MatmulFn& mm, std::mt19937& rng) {
    for (auto f : kFormats) {
        for (const auto& s : kShapes) {
            if (f == WeightFormat::F32 && s.rows * s.cols > 300 * 2048) continue;  // the oracle is slow; shape-only
            if (s.rows * s.cols * s.n > g_max_work) continue;
            const int64_t block = f == WeightFormat::FP8_E4M3_B128 ? 1 : weight_block_cols(f);
            if (s.cols % block != 0) continue;  // 80, 200: ragged widths, for the formats that allow them
            const auto wf = random_vec(s.rows * s.cols, rng, 0.05f);
            const QuantizedWeight q = quantize(wf.data(), s.rows, s.cols, f);
            const Weight w = q.view();
            const auto x = random_vec(s.n * s.cols, rng);
            std::vector<float> y(static_cast<size_t>(s.n * w.rows), std::nanf(""));
            const std::string what = cat(name, " ", weight_format_name(f), " ", s.rows, "x", s.cols, " n=", s.n);
            std::string why;
            try {
                mm(w, x.data(), s.n, y.data());
            } catch (const Error& e) {
                report(false, what + ": " + e.what());
                continue;
            }
            report(check_against_ref(w, x, s.n, y, why), what + " vs reference: " + why);
            // Batch invariance: the first, a middle and the last row alone give the rows' bits from the batch.
            bool invariant = true;
            for (int64_t i : {int64_t(0), s.n / 2, s.n - 1}) {
                std::vector<float> alone(static_cast<size_t>(w.rows), std::nanf(""));
                mm(w, x.data() + i * s.cols, 1, alone.data());
                invariant = invariant && same_bits(alone.data(), y.data() + i * w.rows, w.rows);
            }
            // ... and a batch of rows 1..n-1 (every row at another place in its tile).
            if (s.n > 2) {
                std::vector<float> shifted(static_cast<size_t>((s.n - 1) * w.rows), std::nanf(""));
                mm(w, x.data() + s.cols, s.n - 1, shifted.data());
                invariant = invariant && same_bits(shifted.data(), y.data() + w.rows, (s.n - 1) * w.rows);
            }
            report(invariant, what + ": a row's bits depend on the rest of the batch");
        }
    }
}

// ---- CPU paths that promise the portable path's bits (ops::cpu_path_matches_portable: NEON) ----

// Outputs equal bit for bit, NaN for NaN (a NaN's payload is whichever NaN operand an add happened to take first,
// which the compiler may order either way in either path).
bool same_values(const float* a, const float* b, int64_t count, std::string& why) {
    for (int64_t i = 0; i < count; ++i) {
        if (std::isnan(a[i]) && std::isnan(b[i])) continue;
        if (std::memcmp(a + i, b + i, 4) != 0) {
            char buf[96];
            std::snprintf(buf, sizeof buf, "%a vs portable %a", double(a[i]), double(b[i]));
            why = cat("element ", i, ": ", buf);
            return false;
        }
    }
    return true;
}

struct PathBits {
    ThreadPool& pool;
    ops::CpuPath path;
    std::string name;

    // The same matmul and every dequantised row on `path` and on the portable path: the same bits (dequantised
    // rows: NaN payloads too, each value being a single operation's result).
    void compare(const Weight& w, const std::vector<float>& x, int64_t n, const std::string& what) const {
        auto run = [&](ops::CpuPath p, std::vector<float>& y, std::vector<float>& rows) {
            ops::set_cpu_path(p);
            y.assign(size_t(n * w.rows), std::nanf(""));
            ops::matmul(w, x.data(), n, y.data(), pool);
            rows.assign(size_t(w.rows * w.cols), 0.0f);
            for (int64_t r = 0; r < w.rows; ++r) ops::dequantize_row(w, r, rows.data() + r * w.cols);
        };
        std::vector<float> y, rows, y_port, rows_port;
        run(path, y, rows);
        run(ops::CpuPath::Portable, y_port, rows_port);
        std::string why;
        report(same_values(y.data(), y_port.data(), n * w.rows, why), cat(name, " ", what, " matmul: ", why));
        const bool rows_same = same_bits(rows.data(), rows_port.data(), w.rows * w.cols);
        report(rows_same, cat(name, " ", what, ": a dequantised row differs from the portable path's"));
    }
};

void check_portable_bits(ThreadPool& pool, std::mt19937& rng) {
    const ops::CpuPath saved = ops::cpu_path();
    for (ops::CpuPath path : ops::available_cpu_paths()) {
        if (path == ops::CpuPath::Portable || !ops::cpu_path_matches_portable(path)) continue;
        const PathBits pb{pool, path, cat("cpu/", ops::cpu_path_name(path), " vs cpu/portable")};
        // Every format on check_backend's shapes (the gguf formats where their 32/256-column blocks fit).
        const WeightFormat formats[] = {WeightFormat::F32,   WeightFormat::F16,  WeightFormat::BF16,
                                        WeightFormat::FP8_E4M3_B128, WeightFormat::MXFP4, WeightFormat::INT4_G32,
                                        WeightFormat::Q8_0,  WeightFormat::Q4_K, WeightFormat::Q6_K,
                                        WeightFormat::MXFP4_GGML};
        for (auto f : formats) {
            for (const auto& s : kShapes) {
                const int64_t block = f == WeightFormat::FP8_E4M3_B128 ? 1 : weight_block_cols(f);
                if (s.cols % block != 0 || s.rows * s.cols * s.n > g_max_work) continue;
                const auto wf = random_vec(s.rows * s.cols, rng, 0.05f);
                const QuantizedWeight q = quantize(wf.data(), s.rows, s.cols, f);
                pb.compare(q.view(), random_vec(s.n * s.cols, rng), s.n,
                           cat(weight_format_name(f), " ", s.rows, "x", s.cols, " n=", s.n));
            }
        }
        // Every 16-bit pattern as F16 and BF16 weights: NaNs (signalling ones too), infinities, subnormals.
        for (auto f : {WeightFormat::F16, WeightFormat::BF16}) {
            QuantizedWeight q{f, 2048, 40, std::vector<uint8_t>(2048 * 40 * 2), {}};
            for (size_t i = 0; i < q.data.size() / 2; ++i) {
                const uint16_t v = uint16_t(i < 65536 ? i : rng());
                std::memcpy(q.data.data() + 2 * i, &v, 2);
            }
            pb.compare(q.view(), random_vec(3 * 40, rng), 3, cat(weight_format_name(f), " every bit pattern"));
        }
        // Every FP8 code, with scales across the f32 range (zero, subnormal, huge, infinite, NaN).
        {
            const float scales[] = {1.0f, 0.0f, -0.0f, 1e-40f, 3e38f, -2.5f, INFINITY, std::nanf(""), 1e-3f};
            const int64_t rows = 9 * 128, cols = 300;  // 9 row tiles, 3 column tiles (the last one ragged)
            QuantizedWeight q{WeightFormat::FP8_E4M3_B128, rows, cols, std::vector<uint8_t>(size_t(rows * cols)),
                              std::vector<uint8_t>(9 * 3 * 4)};
            for (size_t i = 0; i < q.data.size(); ++i) q.data[i] = uint8_t(i);
            for (int t = 0; t < 27; ++t) std::memcpy(q.scales.data() + 4 * t, &scales[(t / 3 + t) % 9], 4);
            pb.compare(q.view(), random_vec(2 * cols, rng), 2, "FP8_E4M3_B128 every code, odd scales");
        }
        // Every E8M0 scale (MXFP4, ggml MXFP4) and bf16 scales across the range (INT4_G32) with random codes.
        {
            QuantizedWeight mx{WeightFormat::MXFP4, 8, 1024, std::vector<uint8_t>(8 * 512), std::vector<uint8_t>(256)};
            for (auto& b : mx.data) b = uint8_t(rng());
            for (int i = 0; i < 256; ++i) mx.scales[size_t(i)] = uint8_t(i);
            pb.compare(mx.view(), random_vec(3 * 1024, rng), 3, "MXFP4 every scale");
            QuantizedWeight gg{WeightFormat::MXFP4_GGML, 8, 1024, std::vector<uint8_t>(8 * 32 * 17), {}};
            for (size_t i = 0; i < gg.data.size(); ++i) gg.data[i] = i % 17 == 0 ? uint8_t(i / 17) : uint8_t(rng());
            pb.compare(gg.view(), random_vec(3 * 1024, rng), 3, "MXFP4_GGML every scale");
            QuantizedWeight i4{WeightFormat::INT4_G32, 64, 4096, std::vector<uint8_t>(64 * 2048),
                               std::vector<uint8_t>(64 * 128 * 2)};
            for (auto& b : i4.data) b = uint8_t(rng());
            for (size_t i = 0; i < i4.scales.size() / 2; ++i) {  // every exponent, both signs, random mantissas
                const uint16_t v = uint16_t((i & 0xFF) << 7 | (rng() & 0x7F) | (i & 0x100 ? 0x8000 : 0));
                std::memcpy(i4.scales.data() + 2 * i, &v, 2);
            }
            pb.compare(i4.view(), random_vec(2 * 4096, rng), 2, "INT4_G32 scales across the bf16 range");
        }
    }
    ops::set_cpu_path(saved);
}

// On CUDA: a weight inside a stable range is kept on the device; its product must equal the per-call copy's.
void check_cuda_stable_copy(std::mt19937& rng) {
    for (auto f : {WeightFormat::BF16, WeightFormat::MXFP4, WeightFormat::INT4_G32, WeightFormat::FP8_E4M3_B128}) {
        const auto wf = random_vec(192 * 1024, rng, 0.05f);
        QuantizedWeight q = quantize(wf.data(), 192, 1024, f);
        const auto x = random_vec(5 * 1024, rng);
        std::vector<float> a(5 * 192), b(5 * 192), c(5 * 192);
        cuda::matmul(q.view(), x.data(), 5, a.data());  // transient: bytes not in a stable range
        const uint64_t id = stable_memory::add(q.data.data(), q.data.size());
        const uint64_t ids = q.scales.empty() ? 0 : stable_memory::add(q.scales.data(), q.scales.size());
        cuda::matmul(q.view(), x.data(), 5, b.data());  // copied and kept
        cuda::matmul(q.view(), x.data(), 5, c.data());  // the kept copy
        const auto st = cuda::stats();
        stable_memory::remove(id);
        if (ids) stable_memory::remove(ids);
        report(same_bits(a.data(), b.data(), 5 * 192) && same_bits(b.data(), c.data(), 5 * 192) && st.weight_hits > 0,
               cat("cuda ", weight_format_name(f), ": a kept device copy gives other bits than a per-call copy"));
    }
}

// On CUDA: a slot rewritten in place and registered by content (the expert cache, the spine streamer) keeps a device
// copy per content: B written over A gets B's product (never A's kept copy), and A written back is a hit, not a copy.
void check_cuda_content_keyed_slot(std::mt19937& rng) {
    for (auto f : {WeightFormat::BF16, WeightFormat::MXFP4, WeightFormat::FP8_E4M3_B128}) {
        const int64_t rows = 160, cols = 1024, n = 3;
        const auto fa = random_vec(rows * cols, rng, 0.05f), fb = random_vec(rows * cols, rng, 0.05f);
        QuantizedWeight qa = quantize(fa.data(), rows, cols, f), qb = quantize(fb.data(), rows, cols, f);
        const uint64_t scale_at = (qa.data.size() + 255) / 256 * 256;
        std::vector<uint8_t> slot(scale_at + qa.scales.size());
        auto fill = [&](const QuantizedWeight& q) {
            std::memcpy(slot.data(), q.data.data(), q.data.size());
            if (!q.scales.empty()) std::memcpy(slot.data() + scale_at, q.scales.data(), q.scales.size());
        };
        Weight w = qa.view();
        w.data = slot.data();
        w.scales = qa.scales.empty() ? nullptr : slot.data() + scale_at;
        const auto x = random_vec(n * cols, rng);
        const size_t ny = size_t(n * rows);
        std::vector<float> ya(ny), yb(ny), yb_ref(ny), ya2(ny);
        const uint64_t space = stable_memory::new_space();
        cuda::matmul(qb.view(), x.data(), n, yb_ref.data());  // per-call copy of B's own bytes
        fill(qa);
        stable_memory::set_at(slot.data(), slot.size(), stable_memory::content_id(space, 3, 7));
        cuda::matmul(w, x.data(), n, ya.data());
        fill(qb);
        stable_memory::set_at(slot.data(), slot.size(), stable_memory::content_id(space, 3, 8));
        cuda::matmul(w, x.data(), n, yb.data());
        fill(qa);
        stable_memory::set_at(slot.data(), slot.size(), stable_memory::content_id(space, 3, 7));
        const auto before = cuda::stats();
        cuda::matmul(w, x.data(), n, ya2.data());
        const auto after = cuda::stats();
        stable_memory::remove_at(slot.data());
        report(same_bits(yb.data(), yb_ref.data(), n * rows) && same_bits(ya.data(), ya2.data(), n * rows) &&
                   !same_bits(ya.data(), yb.data(), n * rows) && after.weight_hits == before.weight_hits + 1 &&
                   after.weight_upload_bytes == before.weight_upload_bytes,
               cat("cuda ", weight_format_name(f), ": a content-keyed slot must keep one device copy per content"));
    }
}

// A NaN scale (E8M0 0xFF, a NaN bf16) makes its whole block NaN, zero codes included, and only its row's outputs.
void check_nan_scales(const char* name, const MatmulFn& mm, std::mt19937& rng) {
    for (auto f : {WeightFormat::MXFP4, WeightFormat::INT4_G32}) {
        const int64_t rows = 40, cols = 256, n = 3, bad_row = 17;
        auto wf = random_vec(rows * cols, rng, 0.05f);
        for (int64_t c = 0; c < 32; ++c) wf[size_t(bad_row * cols + 64 + c)] = 0.0f;  // a block of zero codes
        QuantizedWeight q = quantize(wf.data(), rows, cols, f);
        if (f == WeightFormat::MXFP4) {
            q.scales[size_t(bad_row * (cols / 32) + 2)] = 0xFF;
        } else {
            const uint16_t nan_bf16 = 0x7FC0;
            std::memcpy(q.scales.data() + (bad_row * (cols / 32) + 2) * 2, &nan_bf16, 2);
        }
        const auto x = random_vec(n * cols, rng);
        std::vector<float> y(static_cast<size_t>(n * rows), 0.0f);
        mm(q.view(), x.data(), n, y.data());
        bool ok = true;
        for (int64_t i = 0; i < n; ++i)
            for (int64_t r = 0; r < rows; ++r) ok = ok && (std::isnan(y[size_t(i * rows + r)]) == (r == bad_row));
        report(ok, cat(name, " ", weight_format_name(f), ": a NaN scale must poison its row, and only its row"));
    }
}

// ---- attention: every backend against ops::ref::attention ----

struct AttnCase {
    int64_t heads, kv_heads, dk, dv, window;
    bool sinks, values_in_keys;  // values_in_keys: MLA's latents, the values are the keys' first dv columns
    int64_t cached, n;           // keys already cached, then n new rows at positions cached..cached+n-1
    int64_t page_rows;           // >0: keys and values read through pages of this many rows
};
const AttnCase kAttnCases[] = {
    {8, 2, 64, 64, 0, false, false, 0, 33, 0},    {4, 4, 128, 128, 0, false, false, 70, 5, 16},
    {16, 1, 576, 512, 0, false, true, 0, 40, 0},  {16, 1, 576, 512, 0, false, true, 700, 3, 64},
    {6, 2, 64, 64, 7, true, false, 10, 37, 0},     {3, 1, 40, 24, 0, false, false, 1, 1, 0},
    {5, 5, 17, 33, 0, true, false, 0, 100, 8},     {2, 1, 256, 256, 0, false, false, 31, 66, 0},
    {8, 1, 64, 64, 20, false, true, 300, 1, 64},  {6, 2, 64, 64, 300, true, false, 600, 5, 0},
    {4, 2, 32, 32, 0, true, false, 1000, 40, 32},
};

using AttnFn = std::function<void(const AttentionParams&, const float*, int64_t, const int64_t*, ops::RowView,
                                  ops::RowView, float*)>;

void check_attention(const char* name, const AttnFn& fn, std::mt19937& rng) {
    for (const auto& c : kAttnCases) {
        const int64_t T = c.cached + c.n, kw = c.kv_heads * c.dk, vw = c.kv_heads * c.dv;
        const auto kbuf = random_vec(T * kw, rng), vbuf = random_vec(T * vw, rng), q = random_vec(c.n * c.heads * c.dk, rng);
        std::vector<float> sinks = random_vec(c.heads, rng);
        AttentionParams p;
        p.n_heads = c.heads;
        p.n_kv_heads = c.kv_heads;
        p.head_dim_k = c.dk;
        p.head_dim_v = c.dv;
        p.scale = 1.0f / std::sqrt(float(c.dk));
        p.sinks = c.sinks ? sinks.data() : nullptr;
        p.window = c.window;
        std::vector<int64_t> pos(static_cast<size_t>(c.n));
        for (int64_t i = 0; i < c.n; ++i) pos[size_t(i)] = c.cached + i;
        const float* vbase = c.values_in_keys ? kbuf.data() : vbuf.data();
        const int64_t vstride = c.values_in_keys ? kw : vw;
        // paged views: copies of the rows in separately allocated pages
        std::vector<std::vector<float>> kpages, vpages;
        std::vector<const float*> kptr, vptr;
        auto view = [&](const float* base, int64_t stride, std::vector<std::vector<float>>& pages,
                        std::vector<const float*>& ptrs) {
            if (c.page_rows == 0) return ops::RowView::contiguous(base, stride);
            for (int64_t t0 = 0; t0 < T; t0 += c.page_rows) {
                pages.emplace_back(static_cast<size_t>(c.page_rows * stride), std::nanf(""));
                std::copy_n(base + t0 * stride, std::min(c.page_rows, T - t0) * stride, pages.back().data());
                ptrs.push_back(pages.back().data());
            }
            int64_t shift = 0;
            while ((int64_t(1) << shift) < c.page_rows) ++shift;
            return ops::RowView{ptrs.data(), nullptr, shift, stride};
        };
        const ops::RowView kv = view(kbuf.data(), kw, kpages, kptr);
        const ops::RowView vv = c.values_in_keys ? kv : view(vbase, vstride, vpages, vptr);
        const std::string what = cat(name, " attention h", c.heads, "/", c.kv_heads, " d", c.dk, "/", c.dv,
                                     c.values_in_keys ? " (values in keys)" : "", c.window ? cat(" window ", c.window) : "",
                                     c.sinks ? " sinks" : "", c.page_rows ? cat(" pages of ", c.page_rows) : "",
                                     " cached ", c.cached, " n=", c.n);
        const int64_t out_w = c.heads * c.dv;
        std::vector<float> y(static_cast<size_t>(c.n * out_w), std::nanf("")), ref(y.size());
        try {
            fn(p, q.data(), c.n, pos.data(), kv, vv, y.data());
        } catch (const Error& e) {
            report(false, what + ": " + e.what());
            continue;
        }
        ops::ref::attention(p, q.data(), c.n, pos.data(), kbuf.data(), kw, vbase, vstride, ref.data());
        double vmax = 0;
        for (int64_t t = 0; t < T; ++t)
            for (int64_t j = 0; j < vw; ++j) vmax = std::max(vmax, double(std::fabs(vbase[t * vstride + j])));
        std::string why;
        for (size_t i = 0; i < y.size() && why.empty(); ++i)
            if (!std::isfinite(y[i]) || std::fabs(double(y[i]) - ref[i]) > 1e-5 * vmax)
                why = cat("element ", i, ": got ", y[i], ", want ", ref[i]);
        report(why.empty(), what + " vs reference: " + why);
        // a row's bits: the same alone, and in a call without the first row
        bool invariant = true;
        for (int64_t i : {int64_t(0), c.n / 2, c.n - 1}) {
            std::vector<float> alone(static_cast<size_t>(out_w), std::nanf(""));
            fn(p, q.data() + i * c.heads * c.dk, 1, pos.data() + i, kv, vv, alone.data());
            invariant = invariant && same_bits(alone.data(), y.data() + i * out_w, out_w);
        }
        if (c.n > 2) {
            std::vector<float> rest(static_cast<size_t>((c.n - 1) * out_w), std::nanf(""));
            fn(p, q.data() + c.heads * c.dk, c.n - 1, pos.data() + 1, kv, vv, rest.data());
            invariant = invariant && same_bits(rest.data(), y.data() + out_w, (c.n - 1) * out_w);
        }
        report(invariant, what + ": a row's bits depend on the other rows of the call");
    }
}

// ---- the MoE ops (routing, gated activations, combine) against their twins; CPU only for now ----

void check_moe_ops(const char* name, ThreadPool& pool, std::mt19937& rng) {
    using S = ops::RouterSpec::Scoring;
    struct R {
        S scoring;
        int64_t experts, k, groups, keep;
        bool norm, bias;
        float scaling;
    };
    const R routers[] = {{S::Sigmoid, 64, 6, 8, 3, true, true, 2.5f},    {S::Sigmoid, 896, 16, 1, 1, true, true, 2.827f},
                         {S::Sigmoid, 24, 4, 1, 1, false, false, 1.0f},  {S::Softmax, 128, 8, 1, 1, true, false, 1.0f},
                         {S::Softmax, 8, 2, 1, 1, false, false, 1.0f},   {S::TopkSoftmax, 32, 4, 1, 1, false, false, 1.0f}};
    for (const auto& c : routers) {
        const ops::RouterSpec spec{c.scoring, c.experts, c.k, c.groups, c.keep, c.norm, c.scaling};
        for (int64_t n : {1, 7, 300}) {
            const auto logits = random_vec(n * c.experts, rng, 2.0f);
            const auto bias = random_vec(c.experts, rng, 0.1f);
            const float* b = c.bias ? bias.data() : nullptr;
            std::vector<int32_t> e(static_cast<size_t>(n * c.k), -1), re(e.size());
            std::vector<float> w(e.size(), std::nanf("")), rw(e.size());
            ops::route(spec, logits.data(), b, n, e.data(), w.data(), pool);
            ops::ref::route(spec, logits.data(), b, n, re.data(), rw.data());
            std::string why;
            for (size_t i = 0; i < e.size() && why.empty(); ++i) {
                if (e[i] != re[i]) why = cat("slot ", i, ": expert ", e[i], ", want ", re[i]);
                else if (!(std::fabs(double(w[i]) - rw[i]) <= 1e-6 * std::fabs(rw[i]) + 1e-9))
                    why = cat("slot ", i, ": weight ", w[i], ", want ", rw[i]);
            }
            const std::string what = cat(name, " route scoring ", int(c.scoring), " E", c.experts, " k", c.k, " groups ",
                                         c.groups, "/", c.keep, " n=", n);
            report(why.empty(), what + " vs reference: " + why);
            std::vector<int32_t> e1(static_cast<size_t>(c.k));
            std::vector<float> w1(static_cast<size_t>(c.k));
            const int64_t last = n - 1;
            ops::route(spec, logits.data() + last * c.experts, b, 1, e1.data(), w1.data(), pool);
            report(std::equal(e1.begin(), e1.end(), e.begin() + last * c.k) &&
                       same_bits(w1.data(), w.data() + last * c.k, c.k),
                   what + ": a row's routing depends on the other rows");
        }
    }
    using K = ops::GluSpec::Kind;
    for (K kind : {K::Silu, K::Situ, K::ClampedSwiglu}) {
        for (int64_t stride : {1, 2}) {
            const int64_t n = 1000;
            auto gu = random_vec(n * 2, rng, 4.0f);
            gu[0] = 100.0f, gu[1] = -100.0f, gu[2] = -100.0f, gu[3] = 100.0f;  // past the clamps and the saturations
            ops::GluSpec spec;
            spec.kind = kind;
            const float* gate = gu.data();
            const float* up = stride == 1 ? gu.data() + n : gu.data() + 1;
            std::vector<float> y(static_cast<size_t>(n), std::nanf("")), ref(y.size());
            ops::glu(spec, gate, up, stride, n, y.data());
            ops::ref::glu(spec, gate, up, stride, n, ref.data());
            std::string why;
            for (int64_t i = 0; i < n && why.empty(); ++i)
                if (!(std::fabs(double(y[size_t(i)]) - ref[size_t(i)]) <= 2e-6 * std::fabs(ref[size_t(i)]) + 1e-6))
                    why = cat("element ", i, ": got ", y[size_t(i)], ", want ", ref[size_t(i)]);
            report(why.empty(), cat(name, " glu kind ", int(kind), " stride ", stride, " vs reference: ", why));
        }
    }
    struct C {
        int64_t n, k, hidden;
    };
    for (const C& c : {C{1, 1, 7}, C{5, 16, 300}, C{64, 8, 129}, C{3, 4, 2048}}) {
        const auto y = random_vec(c.n * c.k * c.hidden, rng), w = random_vec(c.n * c.k, rng, 0.3f);
        std::vector<float> out(static_cast<size_t>(c.n * c.hidden), std::nanf("")), ref(out.size());
        ops::moe_combine(y.data(), w.data(), c.n, c.k, c.hidden, out.data(), pool);
        ops::ref::moe_combine(y.data(), w.data(), c.n, c.k, c.hidden, ref.data());
        std::string why;
        for (int64_t r = 0; r < c.n && why.empty(); ++r)
            for (int64_t j = 0; j < c.hidden && why.empty(); ++j) {
                double mag = 0;
                for (int64_t k = 0; k < c.k; ++k) mag += std::fabs(double(w[size_t(r * c.k + k)]) * y[size_t((r * c.k + k) * c.hidden + j)]);
                const size_t i = size_t(r * c.hidden + j);
                if (!(std::fabs(double(out[i]) - ref[i]) <= 1e-6 * mag + 1e-30))
                    why = cat("row ", r, " column ", j, ": got ", out[i], ", want ", ref[i]);
            }
        report(why.empty(), cat(name, " moe_combine n=", c.n, " k", c.k, " hidden ", c.hidden, " vs reference: ", why));
    }
}

// ---- MLA's absorption against its twin; CPU only for now ----

void check_mla_ops(const char* name, ThreadPool& pool, std::mt19937& rng) {
    struct M {
        ops::MlaHeads h;
        int64_t n;
    };
    const M cases[] = {{{3, 16, 8, 16, 32}, 5}, {{8, 128, 64, 128, 512}, 3}, {{2, 32, 0, 64, 64}, 40}};
    for (auto f : {WeightFormat::F32, WeightFormat::BF16, WeightFormat::FP8_E4M3_B128}) {
        for (const auto& c : cases) {
            const auto& m = c.h;
            const auto wf = random_vec(m.heads * (m.nope + m.v) * m.rank, rng, 0.05f);
            const QuantizedWeight qw = quantize(wf.data(), m.heads * (m.nope + m.v), m.rank, f);
            const Weight w = qw.view();
            const std::string what = cat(name, " MLA ", weight_format_name(f), " heads ", m.heads, " nope ", m.nope,
                                         " rope ", m.rope, " v ", m.v, " rank ", m.rank, " n=", c.n);
            // absorb: |got - want| <= 1e-5 * sum |q w| (want from the twin in double)
            const auto q = random_vec(c.n * m.heads * (m.nope + m.rope), rng);
            const int64_t cw = m.rank + m.rope;
            std::vector<float> got(static_cast<size_t>(c.n * m.heads * cw), std::nanf("")), want(got.size());
            ops::mla_absorb(m, w, q.data(), c.n, got.data(), pool);
            ops::ref::mla_absorb(m, w, q.data(), c.n, want.data());
            std::vector<float> row(static_cast<size_t>(m.rank));
            std::string why;
            for (int64_t r = 0; r < c.n && why.empty(); ++r)
                for (int64_t h = 0; h < m.heads && why.empty(); ++h) {
                    std::vector<double> mag(static_cast<size_t>(m.rank), 0.0);
                    for (int64_t i = 0; i < m.nope; ++i) {
                        ops::ref::dequantize_row(w, h * (m.nope + m.v) + i, row.data());
                        for (int64_t j = 0; j < m.rank; ++j)
                            mag[size_t(j)] += std::fabs(double(q[size_t((r * m.heads + h) * (m.nope + m.rope) + i)]) * row[size_t(j)]);
                    }
                    for (int64_t j = 0; j < cw && why.empty(); ++j) {
                        const size_t at = size_t((r * m.heads + h) * cw + j);
                        const double tol = j < m.rank ? 1e-5 * mag[size_t(j)] + 1e-30 : 0.0;
                        if (!(std::fabs(double(got[at]) - want[at]) <= tol))
                            why = cat("absorb row ", r, " head ", h, " column ", j, ": got ", got[at], ", want ", want[at]);
                    }
                }
            report(why.empty(), what + " absorb vs reference: " + why);
            // unabsorb
            const auto lat = random_vec(c.n * m.heads * m.rank, rng);
            std::vector<float> o(static_cast<size_t>(c.n * m.heads * m.v), std::nanf("")), oref(o.size());
            ops::mla_unabsorb(m, w, lat.data(), c.n, o.data(), pool);
            ops::ref::mla_unabsorb(m, w, lat.data(), c.n, oref.data());
            why.clear();
            for (int64_t h = 0; h < m.heads && why.empty(); ++h)
                for (int64_t i = 0; i < m.v && why.empty(); ++i) {
                    ops::ref::dequantize_row(w, h * (m.nope + m.v) + m.nope + i, row.data());
                    for (int64_t r = 0; r < c.n && why.empty(); ++r) {
                        double mag = 0;
                        for (int64_t j = 0; j < m.rank; ++j)
                            mag += std::fabs(double(row[size_t(j)]) * lat[size_t((r * m.heads + h) * m.rank + j)]);
                        const size_t at = size_t((r * m.heads + h) * m.v + i);
                        if (!(std::fabs(double(o[at]) - oref[at]) <= 1e-5 * mag + 1e-30))
                            why = cat("unabsorb row ", r, " head ", h, " output ", i, ": got ", o[at], ", want ", oref[at]);
                    }
                }
            report(why.empty(), what + " unabsorb vs reference: " + why);
            // a row alone: the same bits
            std::vector<float> one(static_cast<size_t>(m.heads * cw));
            const int64_t last = c.n - 1;
            ops::mla_absorb(m, w, q.data() + last * m.heads * (m.nope + m.rope), 1, one.data(), pool);
            report(same_bits(one.data(), got.data() + last * m.heads * cw, m.heads * cw),
                   what + ": a row's absorbed query depends on the other rows");
        }
    }
}

// ---- RoPE's rotation against its twin; CPU only for now ----

void check_rope(const char* name, std::mt19937& rng) {
    struct R {
        int64_t half, heads, stride;
    };
    std::uniform_real_distribution<float> angle(-3.2f, 3.2f);
    for (auto layout : {ops::RopeLayout::Interleaved, ops::RopeLayout::Half})
        for (const R& r : {R{32, 1, 64}, R{32, 16, 192}, R{3, 5, 7}, R{64, 8, 128}}) {
            std::vector<float> c(static_cast<size_t>(r.half)), s(c.size());
            for (int64_t i = 0; i < r.half; ++i) {
                const float a = angle(rng);
                c[size_t(i)] = std::cos(a) * 1.2f;  // YaRN's attention factor scales both
                s[size_t(i)] = std::sin(a) * 1.2f;
            }
            const auto x0 = random_vec(r.heads * r.stride, rng);
            auto got = x0, want = x0;
            ops::rope_rotate(layout, c.data(), s.data(), r.half, got.data(), r.heads, r.stride);
            ops::ref::rope_rotate(layout, c.data(), s.data(), r.half, want.data(), r.heads, r.stride);
            std::string why;
            for (size_t i = 0; i < got.size() && why.empty(); ++i)
                if (!(std::fabs(double(got[i]) - want[i]) <= 1e-6 * (std::fabs(double(want[i])) + 1.0)))
                    why = cat("element ", i, ": got ", got[i], ", want ", want[i]);
            report(why.empty(), cat(name, " rope ", layout == ops::RopeLayout::Half ? "half" : "interleaved", " half ",
                                    r.half, " heads ", r.heads, " stride ", r.stride, " vs reference: ", why));
        }
}

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

void perf(std::mt19937& rng) {
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
}

}  // namespace

int main(int argc, char** argv) {
    bool want_perf = false;
    std::string only;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--perf") {
            want_perf = true;
        } else if (a == "--backend" && i + 1 < argc) {
            only = argv[++i];
        } else if (a == "--small") {
            g_max_work = int64_t(8) << 20;
        } else {
            std::fprintf(stderr, "usage: op_harness [--perf] [--backend cpu|cuda] [--small]\n");
            return 2;
        }
    }
    try {
        std::mt19937 rng(20261202);
        ThreadPool pool(0);
        std::string why;
        const bool cuda_ok = cuda::usable(&why);
        if (only.empty() || only == "cpu") {
            const std::string name = cat("cpu/", ops::cpu_path_name(ops::cpu_path()));
            check_backend(name.c_str(), [&](const Weight& w, const float* x, int64_t n, float* y) {
                ops::matmul(w, x, n, y, pool);
            }, rng);
            check_nan_scales(name.c_str(), [&](const Weight& w, const float* x, int64_t n, float* y) {
                ops::matmul(w, x, n, y, pool);
            }, rng);
            check_attention(name.c_str(), [&](const AttentionParams& p, const float* q, int64_t n, const int64_t* pos,
                                              ops::RowView k, ops::RowView v, float* out) {
                ops::attention(p, q, n, pos, k, v, out, pool);
            }, rng);
            check_moe_ops(name.c_str(), pool, rng);
            check_mla_ops(name.c_str(), pool, rng);
            check_rope(name.c_str(), rng);
            check_kda(name.c_str(), [&](const KdaHeadIo& io, int64_t heads, int64_t T, int64_t D, float* S) {
                ops::kda_recurrent_heads(io, heads, T, D, S, &pool);
            }, true, true, rng);
            check_kda_block_ops(name.c_str(), pool, rng);
            check_elementwise(name.c_str(), rng);
            check_portable_bits(pool, rng);
        }
        if (only.empty() || only == "cuda") {
            if (cuda_ok) {
                check_backend("cuda", [](const Weight& w, const float* x, int64_t n, float* y) {
                    cuda::matmul(w, x, n, y);
                }, rng);
                check_nan_scales("cuda", [](const Weight& w, const float* x, int64_t n, float* y) {
                    cuda::matmul(w, x, n, y);
                }, rng);
                // through the dispatch (calls of kKdaCudaMinRows rows and more go to the card, the decays computed on
                // the host): the CPU loop's bits either way, a sequence's rows split across the two sides included
                check_kda("cuda", [&](const KdaHeadIo& io, int64_t heads, int64_t T, int64_t D, float* S) {
                    ops::set_backend(ops::Backend::Cuda);
                    ops::kda_recurrent_heads(io, heads, T, D, S, &pool);
                    ops::set_backend(ops::Backend::Cpu);
                }, false, true, rng);
                check_cuda_stable_copy(rng);
                check_cuda_content_keyed_slot(rng);
                check_attention("cuda", [](const AttentionParams& p, const float* q, int64_t n, const int64_t* pos,
                                           ops::RowView k, ops::RowView v, float* out) {
                    const cuda::AttentionShape s{p.n_heads, p.n_kv_heads, p.head_dim_k, p.head_dim_v, p.scale, p.sinks,
                                                 p.window};
                    cuda::attention(s, q, n, pos, {k.pages, k.first, k.page_shift, k.stride},
                                    {v.pages, v.first, v.page_shift, v.stride}, out);
                }, rng);
                if (want_perf && g_failed == 0) perf(rng);
            } else {
                std::printf("cuda: not checked (%s)\n", why.c_str());
                if (only == "cuda") return 1;
            }
        }
    } catch (const std::exception& e) {
        std::printf("FAIL %s\n", e.what());
        ++g_failed;
    }
    std::printf("%d passed, %d failed\n", g_passed, g_failed);
    return g_failed ? 1 : 0;
}
