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
//                         an emulator such as qemu-user and the sanitizers' build, where the largest take minutes
// (tests/unit/test_ops.cpp holds the per-CPU-path checks of every op; this program is where backends meet.) The
// checks live in block_op_checks.cpp (KDA, elementwise), layer_op_checks.cpp (MoE, MLA, RoPE) and here (matmul,
// attention, the CUDA copies); cuda_perf.cpp is --perf.
#include <algorithm>
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
#include "ops/exec_context.h"
#include "ops/ops.h"
#include "ops/quantize.h"
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
            ops::cpu::matmul(w, x.data(), n, y.data(), pool);
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

// On CUDA with a card budget below the mapped weights a pass uses: the copies that fit serve every later pass (under
// LRU a pass that cycles through more than the room keeps nothing), a content-keyed weight never pushes them out, the
// kept and per-call copies give the same bits, and the copies of a range that went away are freed for new ones.
void check_cuda_mapped_copies_kept(std::mt19937& rng) {
    const uint64_t saved_budget = cuda::memory_budget();
    const int64_t rows = 256, cols = 1024, n = 2;
    const int nw = 6;
    std::vector<QuantizedWeight> ws;
    for (int i = 0; i < nw; ++i) {
        const auto f = random_vec(rows * cols, rng, 0.05f);
        ws.push_back(quantize(f.data(), rows, cols, WeightFormat::BF16));
    }
    const uint64_t wbytes = ws[0].data.size();  // bf16: no scales, so a kept copy is exactly this
    const auto x = random_vec(n * cols, rng);
    std::vector<std::vector<float>> first(nw, std::vector<float>(size_t(n * rows)));
    std::vector<float> y(size_t(n * rows));
    cuda::matmul(ws[0].view(), x.data(), n, y.data());  // per-call copy: sizes the work buffers for this shape
    cuda::set_memory_budget(cuda::stats().workspace_bytes + 3 * wbytes + wbytes / 2);  // room for three copies
    std::vector<uint64_t> ids;
    for (auto& q : ws) ids.push_back(stable_memory::add(q.data.data(), q.data.size()));
    auto pass = [&](bool keep_first) {
        bool same = true;
        for (int i = 0; i < nw; ++i) {
            cuda::matmul(ws[size_t(i)].view(), x.data(), n, y.data());
            if (keep_first) first[size_t(i)] = y;
            else same = same && same_bits(y.data(), first[size_t(i)].data(), n * rows);
        }
        return same;
    };
    pass(true);
    const auto s1 = cuda::stats();
    bool same = pass(false) && pass(false);
    const auto s3 = cuda::stats();
    // a content-keyed weight (an expert slot) while the mapped copies fill the room: copied for the call
    std::vector<uint8_t> slot(ws[0].data);
    Weight e = ws[0].view();
    e.data = slot.data();
    stable_memory::set_at(slot.data(), slot.size(), stable_memory::content_id(stable_memory::new_space(), 1, 1));
    cuda::matmul(e, x.data(), n, y.data());
    same = same && same_bits(y.data(), first[0].data(), n * rows);
    stable_memory::remove_at(slot.data());
    const auto s4 = cuda::stats();
    same = same && pass(false);
    const auto s5 = cuda::stats();
    // the range goes away: its copies are freed, so a new mapped weight is kept again
    for (uint64_t id : ids) stable_memory::remove(id);
    const uint64_t id_new = stable_memory::add(ws[1].data.data(), ws[1].data.size());
    cuda::matmul(ws[1].view(), x.data(), n, y.data());
    const auto s6 = cuda::stats();
    cuda::matmul(ws[1].view(), x.data(), n, y.data());
    const auto s7 = cuda::stats();
    stable_memory::remove(id_new);
    cuda::set_memory_budget(saved_budget);
    report(same, "cuda: kept and per-call copies of a mapped weight must give the same bits");
    report(s3.weight_hits - s1.weight_hits == 6 && s3.weight_misses == s1.weight_misses,
           cat("cuda: with room for 3 of 6 mapped weights, passes 2 and 3 must take 3 each from kept copies (hits ",
               s3.weight_hits - s1.weight_hits, ", new copies ", s3.weight_misses - s1.weight_misses, ")"));
    report(s4.weight_hits == s3.weight_hits && s4.weight_misses == s3.weight_misses &&
               s5.weight_hits - s4.weight_hits == 3,
           "cuda: a content-keyed weight must not push the kept mapped copies out");
    report(s6.weight_misses == s5.weight_misses + 1 && s7.weight_hits == s6.weight_hits + 1,
           "cuda: the copies of a removed range must be freed for new ones");
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

}  // namespace

int main(int argc, char** argv) {
    bool want_perf = false, no_checks = false;
    std::string only;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--perf") {
            want_perf = true;
        } else if (a == "--perf-groups") {  // only the expert-group part of --perf
            want_perf = g_perf_groups_only = true;
        } else if (a == "--no-checks") {  // the timings alone (under a profiler: its kernels are the first launched)
            no_checks = true;
        } else if (a == "--backend" && i + 1 < argc) {
            only = argv[++i];
        } else if (a == "--small") {
            g_max_work = int64_t(8) << 20;
        } else {
            std::fprintf(stderr, "usage: op_harness [--perf | --perf-groups [--no-checks]] [--backend cpu|cuda] [--small]\n");
            return 2;
        }
    }
    try {
        std::mt19937 rng(20261202);
        std::string why;
        const bool cuda_ok = cuda::usable(&why);
        if (no_checks) {
            if (!want_perf || !cuda_ok) {
                std::printf("--no-checks: nothing to run (it goes with --perf or --perf-groups, on a CUDA device)\n");
                return 2;
            }
            perf(rng);
            return 0;
        }
        if (only.empty() || only == "cpu") {
            // the dispatching ops in a context on the CPU, whatever the process default (SLUICE_DEVICE) says
            ExecContext cpu(0, ops::Backend::Cpu);
            ThreadPool& pool = cpu.pool();
            const std::string name = cat("cpu/", ops::cpu_path_name(ops::cpu_path()));
            check_backend(name.c_str(), [&](const Weight& w, const float* x, int64_t n, float* y) {
                ops::matmul(w, x, n, y, cpu);
            }, rng);
            check_nan_scales(name.c_str(), [&](const Weight& w, const float* x, int64_t n, float* y) {
                ops::matmul(w, x, n, y, cpu);
            }, rng);
            check_attention(name.c_str(), [&](const AttentionParams& p, const float* q, int64_t n, const int64_t* pos,
                                              ops::RowView k, ops::RowView v, float* out) {
                ops::attention(p, q, n, pos, k, v, out, cpu);
            }, rng);
            check_moe_ops(name.c_str(), pool, rng);
            check_expert_group(name.c_str(), cpu, rng);
            check_mla_ops(name.c_str(), pool, rng);
            check_rope(name.c_str(), rng);
            check_kda(name.c_str(), [&](const KdaHeadIo& io, int64_t heads, int64_t T, int64_t D, float* S) {
                ops::kda_recurrent_heads(io, heads, T, D, S, cpu);
            }, true, true, rng);
            check_kda_block_ops(name.c_str(), pool, rng);
            check_elementwise(name.c_str(), rng);
            check_attn_res(name.c_str(), pool, rng);
            check_portable_bits(pool, rng);
        }
        if (only.empty() || only == "cuda") {
            if (cuda_ok) {
                ExecContext gpu(0, ops::Backend::Cuda);  // the dispatch in a context on the card
                check_backend("cuda", [](const Weight& w, const float* x, int64_t n, float* y) {
                    cuda::matmul(w, x, n, y);
                }, rng);
                check_nan_scales("cuda", [](const Weight& w, const float* x, int64_t n, float* y) {
                    cuda::matmul(w, x, n, y);
                }, rng);
                // through the dispatch (calls of kKdaCudaMinRows rows and more go to the card, the decays computed on
                // the host): the CPU loop's bits either way, a sequence's rows split across the two sides included
                check_kda("cuda", [&](const KdaHeadIo& io, int64_t heads, int64_t T, int64_t D, float* S) {
                    ops::kda_recurrent_heads(io, heads, T, D, S, gpu);
                }, false, true, rng);
                check_cuda_stable_copy(rng);
                check_cuda_content_keyed_slot(rng);
                check_cuda_mapped_copies_kept(rng);
                check_cuda_expert_group(rng);
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
