// Op harness in the style of ggml's test-backend-ops: every op on every CPU path this machine has, against the
// ops::ref oracle, over odd and real shapes, with guard regions around outputs; plus quantise -> dequantise
// round trips with known values for every weight format. Tolerance for matmul: |y - ref| <= 1e-5 * sum|w*x|.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/error.h"
#include "ops/cuda/backend.h"
#include "ops/exec_context.h"
#include "ops/ops.h"
#include "ops/quantize.h"
#include "ops/reference/dequantize_detail.h"

namespace sluice {
namespace {

constexpr float kGuard = -12345.678f;
constexpr int64_t kGuardLen = 64;

std::vector<float> random_vec(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = d(rng);
    return v;
}

// Output buffer with guard regions on both sides.
struct Guarded {
    std::vector<float> buf;
    explicit Guarded(int64_t n) : buf(size_t(n + 2 * kGuardLen), kGuard) {}
    float* data() { return buf.data() + kGuardLen; }
    bool guards_intact() const {
        for (int64_t i = 0; i < kGuardLen; ++i)
            if (buf[size_t(i)] != kGuard || buf[buf.size() - 1 - size_t(i)] != kGuard) return false;
        return true;
    }
};

// Restores the active CPU path when a test ends.
struct PathGuard {
    ops::CpuPath saved = ops::cpu_path();
    bool saved_vbmi = ops::avx512_vbmi();
    ~PathGuard() {
        ops::set_cpu_path(saved);
        ops::set_avx512_vbmi(saved_vbmi);
    }
};

// Every available path, and on a CPU with AVX-512 VBMI the Avx512 path a second time with VBMI off, so the few-row
// decoders of AVX-512 CPUs without VBMI run here too. use() makes one active (under a PathGuard).
struct PathVariant {
    ops::CpuPath path;
    bool vbmi;
    std::string name() const {
        return std::string(ops::cpu_path_name(path)) + (path == ops::CpuPath::Avx512 && !vbmi ? "(no vbmi)" : "");
    }
    void use() const {
        ops::set_cpu_path(path);
        ops::set_avx512_vbmi(vbmi);
    }
};

std::vector<PathVariant> path_variants() {
    const bool vbmi = ops::avx512_vbmi();
    std::vector<PathVariant> out;
    for (auto p : ops::available_cpu_paths()) {
        out.push_back({p, vbmi});
        if (p == ops::CpuPath::Avx512 && vbmi) out.push_back({p, false});
    }
    return out;
}

bool same_bits_or_both_nan(float a, float b) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
    return std::memcmp(&a, &b, 4) == 0;
}

const WeightFormat kAllFormats[] = {WeightFormat::F32,  WeightFormat::F16,       WeightFormat::BF16,
                                    WeightFormat::FP8_E4M3_B128, WeightFormat::MXFP4, WeightFormat::INT4_G32,
                                    WeightFormat::Q8_0, WeightFormat::Q4_K,      WeightFormat::Q6_K,
                                    WeightFormat::MXFP4_GGML};

std::vector<int64_t> cols_for(WeightFormat f) {
    switch (weight_block_cols(f)) {
        case 256: return {256, 768, 4096};
        case 32: return {32, 96, 160, 544, 4096};
        default: return {1, 5, 7, 13, 33, 100, 129, 515, 4096};  // float formats and FP8 (ragged 128 tiles)
    }
}

// Checks ops::cpu::matmul on the active path against ops::ref::matmul for one weight and one x.
void check_matmul(const Weight& w, const std::vector<float>& x, int64_t n, ThreadPool& pool, const char* what) {
    std::vector<float> ref(static_cast<size_t>(n * w.rows));
    ops::ref::matmul(w, x.data(), n, ref.data());
    Guarded y(n * w.rows);
    ops::cpu::matmul(w, x.data(), n, y.data(), pool);
    ASSERT_TRUE(y.guards_intact()) << what;
    std::vector<float> row(static_cast<size_t>(w.cols));
    for (int64_t r = 0; r < w.rows; ++r) {
        ops::ref::dequantize_row(w, r, row.data());
        for (int64_t i = 0; i < n; ++i) {
            double mag = 0;
            for (int64_t c = 0; c < w.cols; ++c) mag += std::fabs(double(row[size_t(c)]) * x[size_t(i * w.cols + c)]);
            const float got = y.data()[i * w.rows + r], want = ref[size_t(i * w.rows + r)];
            ASSERT_TRUE(std::isfinite(got)) << what << " row " << r << " i " << i;
            ASSERT_LE(std::fabs(double(got) - want), 1e-5 * mag + 1e-30)
                << what << " row " << r << " i " << i << " got " << got << " want " << want;
        }
    }
}

TEST(Ops, PathsIncludePortable) {
    const auto paths = ops::available_cpu_paths();
    ASSERT_FALSE(paths.empty());
    EXPECT_EQ(paths.front(), ops::CpuPath::Portable);
    EXPECT_FALSE(ops::cpu_path_from_name("sse9").has_value());
    for (auto p : paths) EXPECT_EQ(ops::cpu_path_from_name(ops::cpu_path_name(p)), p);
}

TEST(Ops, DequantizeRowBitExactOnEveryPath) {
    PathGuard guard;
    for (WeightFormat f : kAllFormats)
        for (int64_t cols : cols_for(f)) {
            const int64_t rows = 3;
            const auto src = random_vec(rows * cols, uint32_t(cols) * 7 + uint32_t(f), -3.0f, 3.0f);
            const auto q = quantize(src.data(), rows, cols, f);
            const Weight w = q.view();
            std::vector<float> want(static_cast<size_t>(cols));
            for (auto p : ops::available_cpu_paths()) {
                ops::set_cpu_path(p);
                for (int64_t r = 0; r < rows; ++r) {
                    ops::ref::dequantize_row(w, r, want.data());
                    Guarded got(cols);
                    ops::dequantize_row(w, r, got.data());
                    ASSERT_TRUE(got.guards_intact());
                    for (int64_t c = 0; c < cols; ++c)
                        ASSERT_TRUE(same_bits_or_both_nan(got.data()[c], want[size_t(c)]))
                            << weight_format_name(f) << " " << ops::cpu_path_name(p) << " cols " << cols << " r " << r
                            << " c " << c << ": " << got.data()[c] << " vs " << want[size_t(c)];
                }
            }
        }
}

TEST(Ops, MatmulOddShapesEveryFormatEveryPath) {
    PathGuard guard;
    ThreadPool pool(3);
    for (WeightFormat f : kAllFormats)
        for (int64_t cols : cols_for(f))
            for (int64_t rows : {1, 5, 7, 13, 33}) {
                const auto src = random_vec(rows * cols, uint32_t(rows * 1000 + cols), -2.0f, 2.0f);
                const auto q = quantize(src.data(), rows, cols, f);
                for (int64_t n : {1, 2, 5, 7}) {
                    const auto x = random_vec(n * cols, uint32_t(n + cols));
                    for (const auto& v : path_variants()) {
                        v.use();
                        const std::string what = std::string(weight_format_name(f)) + " " + v.name() + " " +
                                                 std::to_string(rows) +
                                                 "x" + std::to_string(cols) + " n=" + std::to_string(n);
                        check_matmul(q.view(), x, n, pool, what.c_str());
                    }
                }
            }
}

TEST(Ops, MatmulRealShapesSmallBatch) {
    PathGuard guard;
    ThreadPool pool(2);
    for (WeightFormat f : kAllFormats) {
        const int64_t rows = 512, cols = 7168, n = 3;  // a DeepSeek expert projection-like width (rows cut for time)
        const auto src = random_vec(rows * cols, 99 + uint32_t(f));
        const auto q = quantize(src.data(), rows, cols, f);
        const auto x = random_vec(n * cols, 7);
        for (const auto& v : path_variants()) {
            v.use();
            const std::string what = std::string(weight_format_name(f)) + " " + v.name();
            check_matmul(q.view(), x, n, pool, what.c_str());
        }
    }
}

TEST(Ops, MatmulLargerBatchesTiles) {
    PathGuard guard;
    ThreadPool pool(2);
    const int64_t rows = 37, cols = 1056;
    const auto src = random_vec(rows * cols, 5);
    for (WeightFormat f : {WeightFormat::BF16, WeightFormat::MXFP4, WeightFormat::INT4_G32, WeightFormat::FP8_E4M3_B128}) {
        const auto q = quantize(src.data(), rows, cols, f);
        for (int64_t n : {13, 33, 130}) {
            const auto x = random_vec(n * cols, uint32_t(n));
            for (auto p : ops::available_cpu_paths()) {
                ops::set_cpu_path(p);
                check_matmul(q.view(), x, n, pool, (std::string(weight_format_name(f)) + " n=" + std::to_string(n)).c_str());
            }
        }
    }
}

// y must not depend on the thread count or on which other rows share the batch (few-row and blocked kernels
// must agree bit for bit).
TEST(Ops, MatmulDeterministicAcrossThreadsAndBatch) {
    PathGuard guard;
    const int64_t rows = 300, cols = 4096, n = 9;
    const auto src = random_vec(rows * cols, 11);
    const auto x = random_vec(n * cols, 12);
    ThreadPool one(1), three(3);
    for (WeightFormat f : kAllFormats) {
        const auto q = quantize(src.data(), rows, cols, f);
        for (auto p : ops::available_cpu_paths()) {
            ops::set_cpu_path(p);
            const std::string what = std::string(weight_format_name(f)) + " " + std::string(ops::cpu_path_name(p));
            std::vector<float> y1(static_cast<size_t>(n * rows)), y3(static_cast<size_t>(n * rows));
            ops::cpu::matmul(q.view(), x.data(), n, y1.data(), one);
            ops::cpu::matmul(q.view(), x.data(), n, y3.data(), three);
            EXPECT_EQ(0, std::memcmp(y1.data(), y3.data(), y1.size() * 4)) << what;
            for (int64_t m : {1, 2, 3, 4}) {
                std::vector<float> part(static_cast<size_t>(m * rows));
                ops::cpu::matmul(q.view(), x.data() + 4 * cols, m, part.data(), three);
                EXPECT_EQ(0, std::memcmp(part.data(), y1.data() + 4 * rows, size_t(m * rows) * 4)) << what << " m " << m;
            }
        }
    }
}

TEST(Ops, NanScalesPoisonTheirRowsOnly) {
    PathGuard guard;
    ThreadPool pool(2);
    const int64_t rows = 6, cols = 64;
    const auto src = random_vec(rows * cols, 3);
    auto mx = quantize(src.data(), rows, cols, WeightFormat::MXFP4);
    mx.scales[size_t(2 * (cols / 32) + 1)] = 0xFF;  // row 2, block 1: E8M0 NaN
    auto gg = quantize(src.data(), rows, cols, WeightFormat::MXFP4_GGML);
    gg.data[size_t((4 * (cols / 32)) * 17)] = 0xFF;  // row 4, block 0
    auto f8 = quantize(src.data(), rows, cols, WeightFormat::FP8_E4M3_B128);
    f8.data[size_t(1 * cols + 7)] = 0x7F;  // row 1: an e4m3 NaN code
    const auto x = random_vec(2 * cols, 4);
    struct Case { const QuantizedWeight* q; int64_t nan_row; };
    for (auto c : {Case{&mx, 2}, Case{&gg, 4}, Case{&f8, 1}})
        for (auto p : ops::available_cpu_paths()) {
            ops::set_cpu_path(p);
            std::vector<float> y(static_cast<size_t>(2 * rows)), row(static_cast<size_t>(cols));
            ops::cpu::matmul(c.q->view(), x.data(), 2, y.data(), pool);
            for (int64_t i = 0; i < 2; ++i)
                for (int64_t r = 0; r < rows; ++r)
                    EXPECT_EQ(std::isnan(y[size_t(i * rows + r)]), r == c.nan_row)
                        << weight_format_name(c.q->format) << " " << ops::cpu_path_name(p) << " r " << r;
            ops::dequantize_row(c.q->view(), c.nan_row, row.data());
            EXPECT_TRUE(std::isnan(row[c.q->format == WeightFormat::FP8_E4M3_B128 ? 7 : (c.nan_row == 2 ? 32 : 0)]));
        }
}

// One-hot inputs through every path and kernel (one-row fused, few-row, blocked): each output is one weight's
// value, which must be the reference's exactly (an infinite weight gives Inf, a NaN one NaN), wherever the row's
// other weights are finite (0 * Inf there would make the output NaN) and, on AMX, whose tile products flush
// subnormals, the weight is not subnormal. The kernels' fast forms must exclude every scale that would make a weight
// subnormal or infinite. The caller builds w; every input set's first row is hot at column kEdgeColumn, where the
// rows with the largest exponents keep their one infinite weight.
constexpr int64_t kEdgeColumn = 601;
void check_one_hot_values(const Weight& w, std::mt19937& rng) {
    ThreadPool pool(2);
    const int64_t rows = w.rows, cols = w.cols;
    std::vector<float> values(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r) ops::ref::dequantize_row(w, r, &values[size_t(r * cols)]);
    std::vector<int64_t> non_finite(static_cast<size_t>(rows));  // per row
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) non_finite[size_t(r)] += !std::isfinite(values[size_t(r * cols + c)]);
    for (const auto& v : path_variants()) {
        v.use();
        for (int64_t n : {1, 2, 3, 4, 8, 33, 128}) {
            std::vector<float> x(size_t(n * cols), 0.0f), y(size_t(n * rows));
            std::vector<int64_t> at(static_cast<size_t>(n));
            for (int64_t i = 0; i < n; ++i) {
                at[size_t(i)] = i == 0 ? kEdgeColumn : int64_t(rng() % uint32_t(cols));
                x[size_t(i * cols + at[size_t(i)])] = 1.0f;
            }
            ops::cpu::matmul(w, x.data(), n, y.data(), pool);
            int64_t checked = 0;
            for (int64_t i = 0; i < n; ++i)
                for (int64_t r = 0; r < rows; ++r) {
                    const float want = values[size_t(r * cols + at[size_t(i)])], got = y[size_t(i * rows + r)];
                    const bool others_finite = non_finite[size_t(r)] == int64_t(!std::isfinite(want));
                    if (!others_finite || (v.path == ops::CpuPath::Amx && std::fpclassify(want) == FP_SUBNORMAL))
                        continue;
                    ++checked;
                    ASSERT_TRUE(same_bits_or_both_nan(got, want) || (want == 0.0f && got == 0.0f))
                        << v.name() << " n " << n << " row " << r << " col " << at[size_t(i)] << ": " << got
                        << " vs " << want;
                }
            ASSERT_GT(checked, n * rows / 2);
        }
        std::vector<float> row(static_cast<size_t>(cols));
        for (int64_t r = 0; r < rows; ++r) {
            ops::dequantize_row(w, r, row.data());
            for (int64_t c = 0; c < cols; ++c)
                ASSERT_TRUE(same_bits_or_both_nan(row[size_t(c)], values[size_t(r * cols + c)]))
                    << v.name() << " r " << r;
        }
    }
}

// The exponent field of row r's scales in the tests below: the kernels run rows in groups of 4 and take a chunk's
// fast form only when all 4 rows allow it, so each group holds exponents 64 apart (group g: g, 64 + g, 128 + g,
// 192 + g) and a group with one exponent at an edge of a fast form's range has three well inside it.
int exponent_of_row(int64_t r) { return int((r % 4) * 64 + r / 4); }

// INT4_G32 kernels look a block's values up by its scale's mantissa when the scale's exponent allows it
// (ops/cpu/int4_mantissa.h) and multiply and round otherwise: every exponent, random signs and mantissas, and
// zero scales in a few groups. 1056 columns: two 512-column chunks and a 32-column tail (the 64-column VBMI
// decoder's odd end).
TEST(Ops, Int4ScalesOfEveryExponentSameBitsOnEveryPath) {
    PathGuard guard;
    const int64_t rows = 256, cols = 1056, blocks = cols / 32;
    std::mt19937 rng(77);
    std::vector<uint8_t> codes(size_t(rows * cols / 2)), scales(size_t(rows * blocks * 2));
    for (auto& c : codes) c = uint8_t(rng());
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t b = 0; b < blocks; ++b) {
            uint16_t bits = uint16_t((rng() & 0x8000u) | (uint32_t(exponent_of_row(r)) << 7) | (rng() & 0x7Fu));
            std::memcpy(&scales[size_t(2 * (r * blocks + b))], &bits, 2);
        }
    for (int64_t r = 0; r < rows; r += 36) {  // ±0 scales, in one block of every ninth group
        const size_t at = size_t(2 * (r * blocks + int64_t(rng() % uint32_t(blocks))));
        scales[at] = 0;
        scales[at + 1] &= 0x80;
    }
    // Exponents 245..254: zero codes but for a -8 at kEdgeColumn, so a row whose scale makes it infinite still has
    // an output to check.
    for (int64_t r = 0; r < rows; ++r)
        if (exponent_of_row(r) >= 245 && exponent_of_row(r) < 255) {
            std::fill_n(&codes[size_t(r * cols / 2)], cols / 2, uint8_t(0x88));
            codes[size_t((r * cols + kEdgeColumn) / 2)] = kEdgeColumn % 2 ? 0x08 : 0x80;
        }
    check_one_hot_values(Weight{WeightFormat::INT4_G32, rows, cols, codes.data(), scales.data()}, rng);
}

// MXFP4 scales of every exponent field (0: 2^-127, 255: NaN), and in every ninth group one block of another
// exponent, so a 512-column chunk mixes scales (a fast form that holds for some scales only, as INT4's, decides
// per chunk; an exponent add in place of the multiply was tried on the AVX-512 path and caught here when its range
// was off by one).
TEST(Ops, MxScalesOfEveryExponentSameBitsOnEveryPath) {
    PathGuard guard;
    const int64_t rows = 256, cols = 1056, blocks = cols / 32;
    std::mt19937 rng(78);
    std::vector<uint8_t> codes(size_t(rows * cols / 2)), scales(size_t(rows * blocks));
    for (auto& c : codes) c = uint8_t(rng());
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t b = 0; b < blocks; ++b) scales[size_t(r * blocks + b)] = uint8_t(exponent_of_row(r));
    for (int64_t r = 0; r < rows; r += 36)
        scales[size_t(r * blocks + int64_t(rng() % uint32_t(blocks)))] = uint8_t(rng());
    // Exponents 245..254: codes below 2 in magnitude but for a -6 at kEdgeColumn, so a row whose scale makes it
    // infinite (exponent field 253 and 254) still has an output to check.
    for (int64_t r = 0; r < rows; ++r)
        if (exponent_of_row(r) >= 245 && exponent_of_row(r) < 255) {
            for (int64_t c = 0; c < cols / 2; ++c) codes[size_t(r * cols / 2 + c)] &= 0xBB;
            codes[size_t((r * cols + kEdgeColumn) / 2)] |= kEdgeColumn % 2 ? 0xF0 : 0x0F;
        }
    check_one_hot_values(Weight{WeightFormat::MXFP4, rows, cols, codes.data(), scales.data()}, rng);
}

TEST(Ops, Avx512VbmiSwitch) {
    PathGuard guard;
    if (!cpu_features().avx512_vbmi) {
        EXPECT_THROW(ops::set_avx512_vbmi(true), Error);
    }
    ops::set_avx512_vbmi(false);
    EXPECT_FALSE(ops::avx512_vbmi());
    if (cpu_features().avx512_vbmi) {
        ops::set_avx512_vbmi(true);
        EXPECT_TRUE(ops::avx512_vbmi());
    }
}

TEST(Ops, BadShapesThrow) {
    ThreadPool pool(1);
    std::vector<uint8_t> bytes(1024);
    std::vector<float> x(64), y(64);
    Weight w{WeightFormat::MXFP4, 2, 33, bytes.data(), bytes.data()};
    EXPECT_THROW(ops::cpu::matmul(w, x.data(), 1, y.data(), pool), Error);
    w = Weight{WeightFormat::Q4_K, 1, 128, bytes.data(), nullptr};
    EXPECT_THROW(ops::dequantize_row(w, 0, y.data()), Error);
    w = Weight{WeightFormat::INT4_G32, 1, 32, bytes.data(), nullptr};
    EXPECT_THROW(ops::cpu::matmul(w, x.data(), 1, y.data(), pool), Error);
    w = Weight{WeightFormat::BF16, 1, 8, bytes.data(), nullptr};
    EXPECT_THROW(ops::dequantize_row(w, 1, y.data()), Error);
    EXPECT_THROW(quantize(x.data(), 1, 48, WeightFormat::Q8_0), Error);
}

TEST(Ops, RmsNormSiluMulMatchReference) {
    for (int64_t dim : {1, 5, 7, 13, 33, 7168})
        for (int64_t n : {1, 3}) {
            const auto x = random_vec(n * dim, uint32_t(dim), -4.0f, 4.0f);
            const auto wt = random_vec(dim, uint32_t(dim) + 1);
            Guarded got(n * dim);
            std::vector<float> want(static_cast<size_t>(n * dim));
            for (const float* weight : {wt.data(), static_cast<const float*>(nullptr)}) {
                ops::rms_norm(x.data(), weight, n, dim, 1e-6f, got.data());
                ops::ref::rms_norm(x.data(), weight, n, dim, 1e-6f, want.data());
                ASSERT_TRUE(got.guards_intact());
                for (int64_t i = 0; i < n * dim; ++i)
                    ASSERT_NEAR(got.data()[i], want[size_t(i)], 2e-6 * std::fabs(want[size_t(i)]) + 1e-7) << dim;
            }
            const auto up = random_vec(n * dim, uint32_t(dim) + 2, -4.0f, 4.0f);
            ops::silu_mul(x.data(), up.data(), n * dim, got.data());
            ops::ref::silu_mul(x.data(), up.data(), n * dim, want.data());
            ASSERT_TRUE(got.guards_intact());
            for (int64_t i = 0; i < n * dim; ++i) {
                ASSERT_TRUE(std::isfinite(got.data()[i]));
                ASSERT_NEAR(got.data()[i], want[size_t(i)], 1e-6 * std::fabs(want[size_t(i)]) + 1e-7);
            }
        }
}

struct AttentionShape { int64_t heads, kv_heads, dk, dv, keys, rows, window; bool sinks; };

// Random q, k, v (and sinks) for one shape; the rows are the last `rows` of `keys` positions.
struct AttentionCase {
    AttentionParams p;
    std::vector<float> sinks, q, k, v;
    std::vector<int64_t> pos;
    explicit AttentionCase(const AttentionShape& s)
        : sinks(random_vec(s.heads, 1)), q(random_vec(s.rows * s.heads * s.dk, 2)),
          k(random_vec(s.keys * s.kv_heads * s.dk, 3)), v(random_vec(s.keys * s.kv_heads * s.dv, 4)),
          pos(static_cast<size_t>(s.rows)) {
        p.n_heads = s.heads;
        p.n_kv_heads = s.kv_heads;
        p.head_dim_k = s.dk;
        p.head_dim_v = s.dv;
        p.scale = 1.0f / std::sqrt(float(s.dk));
        p.window = s.window;
        p.sinks = s.sinks ? sinks.data() : nullptr;
        for (int64_t r = 0; r < s.rows; ++r) pos[size_t(r)] = s.keys - s.rows + r;
    }
    AttentionCase(const AttentionCase&) = delete;  // p.sinks points into sinks
};

TEST(Ops, AttentionMatchesReference) {
    ThreadPool pool(2);
    using S = AttentionShape;
    for (S s : {S{1, 1, 5, 7, 1, 1, 0, false}, S{4, 2, 13, 13, 9, 3, 0, false}, S{8, 1, 64, 32, 33, 5, 4, true},
                S{6, 6, 33, 7, 17, 17, 0, true}}) {
        const AttentionCase c(s);
        const AttentionParams& p = c.p;
        const auto &q = c.q, &k = c.k, &v = c.v;
        const auto& pos = c.pos;
        Guarded got(s.rows * s.heads * s.dv);
        std::vector<float> want(static_cast<size_t>(s.rows * s.heads * s.dv));
        ops::cpu::attention(p, q.data(), s.rows, pos.data(), k.data(), s.kv_heads * s.dk, v.data(),
                            s.kv_heads * s.dv, got.data(), pool);
        ops::ref::attention(p, q.data(), s.rows, pos.data(), k.data(), s.kv_heads * s.dk, v.data(),
                            s.kv_heads * s.dv, want.data());
        ASSERT_TRUE(got.guards_intact());
        for (size_t i = 0; i < want.size(); ++i) {
            ASSERT_TRUE(std::isfinite(got.data()[i]));
            ASSERT_NEAR(got.data()[i], want[i], 1e-5) << "heads " << s.heads << " i " << i;
        }
    }
}

// Every CPU path gives the same bits (the AVX-512 loops keep the portable lane order and round each multiply and add),
// however the (row, head) pairs are tiled: all rows at once, or one row per call on a pool of another size. The shapes
// cross the tile (32 pairs), the key block (64 rows), 16-lane tails, GQA groups, windows and sinks.
TEST(Ops, AttentionSameBitsOnEveryPathAndTiling) {
    PathGuard guard;
    ThreadPool pool2(2), pool3(3);
    using S = AttentionShape;
    for (S s : {S{24, 1, 144, 128, 300, 37, 0, false}, S{8, 2, 37, 19, 150, 9, 70, true},
                S{6, 6, 16, 16, 65, 65, 0, false}}) {
        const AttentionCase c(s);
        const AttentionParams& p = c.p;
        const auto &q = c.q, &k = c.k, &v = c.v;
        const auto& pos = c.pos;
        const size_t n_out = size_t(s.rows * s.heads * s.dv), row_out = size_t(s.heads * s.dv);
        std::vector<float> first;
        for (auto path : ops::available_cpu_paths()) {
            ops::set_cpu_path(path);
            std::vector<float> all(n_out), one_by_one(n_out);
            ops::cpu::attention(p, q.data(), s.rows, pos.data(), k.data(), s.kv_heads * s.dk, v.data(),
                                s.kv_heads * s.dv, all.data(), pool2);
            for (int64_t r = 0; r < s.rows; ++r)
                ops::cpu::attention(p, q.data() + r * s.heads * s.dk, 1, pos.data() + r, k.data(), s.kv_heads * s.dk,
                                    v.data(), s.kv_heads * s.dv, one_by_one.data() + size_t(r) * row_out, pool3);
            if (first.empty()) first = all;
            for (size_t i = 0; i < n_out; ++i) {
                ASSERT_TRUE(same_bits_or_both_nan(all[i], first[i])) << ops::cpu_path_name(path) << " i " << i;
                ASSERT_TRUE(same_bits_or_both_nan(one_by_one[i], first[i])) << ops::cpu_path_name(path) << " " << i;
            }
        }
    }
}

// A context runs on the backend it was made with (ops/exec_context.h): by default the process setting at that moment,
// and a later change of the setting does not move it; a CPU context's ops give the CPU halves' bits. A Cuda context
// is checked when made: without a usable device it throws, naming why. (With a device: it is made, and a CPU
// context beside it stays on the CPU while the process default is Cuda.)
TEST(Ops, ExecContextRunsOnItsBackend) {
    struct DefaultGuard {
        ops::Backend was = ops::backend();
        ~DefaultGuard() { ops::set_backend(was); }
    } guard;
    ops::set_backend(ops::Backend::Cpu);
    ExecContext by_default(2), cpu(2, ops::Backend::Cpu);
    EXPECT_EQ(by_default.backend(), ops::Backend::Cpu);
    EXPECT_EQ(cpu.backend(), ops::Backend::Cpu);

    const int64_t rows = 40, cols = 96, n = 3;
    const QuantizedWeight q = quantize(random_vec(rows * cols, 11).data(), rows, cols, WeightFormat::BF16);
    const std::vector<float> x = random_vec(n * cols, 12);
    ThreadPool pool(2);
    std::vector<float> want(size_t(n * rows)), got(size_t(n * rows), std::nanf(""));
    ops::cpu::matmul(q.view(), x.data(), n, want.data(), pool);
    const AttentionShape s{4, 2, 13, 13, 9, 3, 0, false};
    const AttentionCase a(s);
    const ops::RowView k = ops::RowView::contiguous(a.k.data(), s.kv_heads * s.dk);
    const ops::RowView v = ops::RowView::contiguous(a.v.data(), s.kv_heads * s.dv);
    std::vector<float> att_want(size_t(s.rows * s.heads * s.dv)), att_got(att_want.size(), std::nanf(""));
    ops::cpu::attention(a.p, a.q.data(), s.rows, a.pos.data(), k, v, att_want.data(), pool);
    std::string why;
    const bool cuda_ok = cuda::usable(&why);
    const auto card_calls = [&] { return cuda_ok ? cuda::stats().calls + cuda::stats().attention_calls : 0; };
    const auto on_cpu_context = [&](ExecContext& ctx) {
        const uint64_t before = card_calls();
        ops::matmul(q.view(), x.data(), n, got.data(), ctx);
        ops::attention(a.p, a.q.data(), s.rows, a.pos.data(), k, v, att_got.data(), ctx);
        EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0);
        EXPECT_EQ(std::memcmp(att_got.data(), att_want.data(), att_want.size() * 4), 0);
        EXPECT_EQ(card_calls(), before);  // nothing went to a card
    };
    on_cpu_context(cpu);

    if (!cuda_ok) {
        try {
            ExecContext gpu(2, ops::Backend::Cuda);
            ADD_FAILURE() << "a CUDA context was made without a usable device";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
        }
        EXPECT_EQ(ops::backend(), ops::Backend::Cpu);  // the failed context left the process default alone
        return;
    }
    ExecContext gpu(2, ops::Backend::Cuda);
    EXPECT_EQ(gpu.backend(), ops::Backend::Cuda);
    ops::set_backend(ops::Backend::Cuda);
    EXPECT_EQ(ExecContext(2).backend(), ops::Backend::Cuda);
    EXPECT_EQ(cpu.backend(), ops::Backend::Cpu);  // made before the change: it stays
    on_cpu_context(cpu);
    ExecContext cpu_beside(2, ops::Backend::Cpu);
    on_cpu_context(cpu_beside);
}

}  // namespace
}  // namespace sluice
