// Matmul accuracy and batch invariance on every CPU path, aimed at the kernels that use bf16 hardware (the AMX
// path splits each f32 activation into three exact bf16 parts): results against a double-precision dot product
// of the dequantised weights with a bound (2e-6 of sum |w*x|) that a two-part split (~2^-17 per product) breaks,
// and bit-identical outputs for a row whatever n, its place in the batch and the thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/phase_times.h"
#include "core/thread_pool.h"
#include "ops/exec_context.h"
#include "ops/ops.h"
#include "ops/quantize.h"

namespace sluice {
namespace {

// Restores the CPU path.
struct PathGuard {
    ops::CpuPath saved = ops::cpu_path();
    ~PathGuard() { ops::set_cpu_path(saved); }
};

const WeightFormat kFormats[] = {WeightFormat::BF16,          WeightFormat::MXFP4, WeightFormat::INT4_G32,
                                 WeightFormat::FP8_E4M3_B128, WeightFormat::F32,   WeightFormat::F16,
                                 WeightFormat::Q8_0,          WeightFormat::Q4_K,  WeightFormat::Q6_K,
                                 WeightFormat::MXFP4_GGML};

std::string label(WeightFormat f, ops::CpuPath p) {
    return std::string(weight_format_name(f)) + " " + std::string(ops::cpu_path_name(p));
}

// y = w x (n inputs) on the current CPU path against the dequantised weights: check(y, exact, mag, r, i) for every
// row r and input i, where exact is the double-precision dot product of row r with input i and mag the sum of |w*x|
// in it. Returns at the first fatal failure.
template <typename Check>
void compare_with_dequantised(const Weight& w, const std::vector<float>& x, int64_t n, ThreadPool& pool,
                              Check&& check) {
    const int64_t rows = w.rows, cols = w.cols;
    std::vector<float> y(size_t(n * rows)), wrow(static_cast<size_t>(cols));
    ops::cpu::matmul(w, x.data(), n, y.data(), pool);
    for (int64_t r = 0; r < rows; ++r) {
        ops::ref::dequantize_row(w, r, wrow.data());
        for (int64_t i = 0; i < n; ++i) {
            double exact = 0, mag = 0;
            for (int64_t c = 0; c < cols; ++c) {
                const double t = double(wrow[size_t(c)]) * double(x[size_t(i * cols + c)]);
                exact += t;
                mag += std::fabs(t);
            }
            check(double(y[size_t(i * rows + r)]), exact, mag, r, i);
            if (::testing::Test::HasFatalFailure()) return;
        }
    }
}

// y = w x on the current CPU path for the n inputs as one batch and for each input alone: check(batched, alone, i, r)
// for every input i and row r. Returns at the first fatal failure.
template <typename Check>
void batched_and_alone(const Weight& w, const float* x, int64_t n, ThreadPool& pool, Check&& check) {
    std::vector<float> all(size_t(n * w.rows)), alone(static_cast<size_t>(w.rows));
    ops::cpu::matmul(w, x, n, all.data(), pool);
    for (int64_t i = 0; i < n; ++i) {
        ops::cpu::matmul(w, x + i * w.cols, 1, alone.data(), pool);
        for (int64_t r = 0; r < w.rows; ++r) {
            check(all[size_t(i * w.rows + r)], alone[size_t(r)], i, r);
            if (::testing::Test::HasFatalFailure()) return;
        }
    }
}

// Positive weights and activations with all 24 mantissa bits in use: truncation errors of an inexact split would
// all have the same sign and add up instead of cancelling.
TEST(MatmulExact, FullMantissaActivationsWithinF32Rounding) {
    PathGuard guard;
    ThreadPool pool(2);
    const int64_t rows = 40, cols = 512, n = 3;
    std::mt19937 rng(21);
    std::uniform_real_distribution<float> wd(0.05f, 2.0f), xd(1.0f, 2.0f);
    std::uniform_int_distribution<int> ed(-20, 20);
    std::vector<float> src(size_t(rows * cols)), x(size_t(n * cols));
    for (auto& v : src) v = wd(rng);
    for (auto& v : x) v = std::ldexp(xd(rng), ed(rng)) * (1.0f + 0x1p-23f * float(rng() % 1024));
    for (WeightFormat f : kFormats) {
        const auto q = quantize(src.data(), rows, cols, f);
        const Weight w = q.view();
        for (auto p : ops::available_cpu_paths()) {
            ops::set_cpu_path(p);
            ASSERT_NO_FATAL_FAILURE(
                compare_with_dequantised(w, x, n, pool, [&](double y, double exact, double mag, int64_t r, int64_t i) {
                    ASSERT_LE(std::fabs(y - exact), 2e-6 * mag) << label(f, p) << " row " << r << " input " << i;
                }));
        }
    }
}

// MXFP4 scales across the E8M0 range (kernels may fold the scale into the exponent only inside a safe range and
// take another route elsewhere), with an odd block count; against the reference within the usual bound.
TEST(MatmulExact, Mxfp4ExtremeScalesMatchReference) {
    PathGuard guard;
    ThreadPool pool(2);
    const int64_t rows = 21, cols = 96, n = 2;
    const uint8_t exps[] = {1, 2, 3, 60, 126, 127, 128, 200, 250, 252};
    std::mt19937 rng(8);
    std::vector<uint8_t> data(size_t(rows * cols / 2)), scales(size_t(rows * cols / 32));
    for (auto& b : data) b = uint8_t(rng());
    for (size_t i = 0; i < scales.size(); ++i) scales[i] = exps[rng() % (i % 3 == 0 ? 10 : 7) + (i % 3 == 0 ? 0 : 3)];
    const Weight w{WeightFormat::MXFP4, rows, cols, data.data(), scales.data()};
    std::vector<float> x(size_t(n * cols)), ref(size_t(n * rows));
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    for (auto& v : x) v = d(rng) * 1e-3f;
    ops::ref::matmul(w, x.data(), n, ref.data());
    for (auto p : ops::available_cpu_paths()) {
        ops::set_cpu_path(p);
        ASSERT_NO_FATAL_FAILURE(
            compare_with_dequantised(w, x, n, pool, [&](double y, double, double mag, int64_t r, int64_t i) {
                ASSERT_LE(std::fabs(y - ref[size_t(i * rows + r)]), 1e-5 * mag + 1e-30)
                    << ops::cpu_path_name(p) << " row " << r << " input " << i;
            }));
    }
}

// INT4 scales across the bf16 range, negative and zero ones included (kernels may fold the scale into the exponent
// only inside a safe range and take another route elsewhere). Multiplying by the identity
// (one input per column, as one batch and one at a time) must give exactly the reference's dequantised weights.
TEST(MatmulExact, Int4ExtremeScalesGiveReferenceWeights) {
    PathGuard guard;
    ThreadPool pool(2);
    // 11 blocks: whole pairs and a last half pair. Rows 0-15 (one 16-row panel) have only positive scales with
    // exponents 1..251; rows 16-20 add negative and zero scales.
    const int64_t rows = 21, cols = 352, nb = cols / 32;
    const uint16_t exps[] = {1, 2, 60, 126, 127, 128, 200, 250, 251};
    std::mt19937 rng(9);
    std::vector<uint8_t> data(size_t(rows * cols / 2)), scales(size_t(rows * nb * 2));
    for (auto& b : data) b = uint8_t(rng());
    for (int64_t i = 0; i < rows * nb; ++i) {
        uint16_t v = uint16_t((exps[rng() % 9] << 7) | (rng() & 0x7F));
        if (i / nb >= 16 && i % 3 == 1) v |= 0x8000;       // negative
        if (i / nb >= 16 && i % 5 == 2) v = i % 2 ? 0x8000 : 0;  // zero
        scales[size_t(2 * i)] = uint8_t(v);
        scales[size_t(2 * i + 1)] = uint8_t(v >> 8);
    }
    const Weight w{WeightFormat::INT4_G32, rows, cols, data.data(), scales.data()};
    std::vector<float> eye(size_t(cols * cols), 0.0f), want(size_t(rows * cols));
    for (int64_t c = 0; c < cols; ++c) eye[size_t(c * cols + c)] = 1.0f;
    for (int64_t r = 0; r < rows; ++r) ops::ref::dequantize_row(w, r, want.data() + r * cols);
    for (auto p : ops::available_cpu_paths()) {
        ops::set_cpu_path(p);
        ASSERT_NO_FATAL_FAILURE(
            batched_and_alone(w, eye.data(), cols, pool, [&](float batched, float alone, int64_t c, int64_t r) {
                const std::string at = std::string(ops::cpu_path_name(p)) + " row " + std::to_string(r) + " col " +
                                       std::to_string(c);
                ASSERT_EQ(batched, want[size_t(r * cols + c)]) << at;
                ASSERT_EQ(alone, want[size_t(r * cols + c)]) << at;
            }));
    }
}

// Scales that are Inf, NaN, or so large that q * scale rounds up to Inf: a row computed alone (the one- and
// two-row kernels of some paths) equals the same row inside a batch (the blocked kernels), NaN for NaN.
TEST(MatmulExact, NibbleNonFiniteScalesSameAloneAndBatched) {
    PathGuard guard;
    ThreadPool pool(2);
    const int64_t rows = 8, cols = 256, nb = cols / 32, n = 5;
    std::mt19937 rng(21);
    for (WeightFormat f : {WeightFormat::INT4_G32, WeightFormat::MXFP4}) {
        const bool int4 = f == WeightFormat::INT4_G32;
        std::vector<uint8_t> data(size_t(rows * cols / 2)), scales(size_t(rows * nb * (int4 ? 2 : 1)));
        for (auto& b : data) b = uint8_t(rng());
        // One scale per row, so a non-finite row does not hide the others: Inf, NaN, products that overflow or
        // sit at the top of the range, -Inf, and mantissas where q * scale must round (INT4).
        const uint16_t int4_scales[rows] = {0x7F80, 0x7FC0, 0x7F7F, 0xFF80, 0x7F40, 0x3FFF, 0x3F81, 0xCB7F};
        const uint8_t mx_scales[rows] = {0xFF, 0xFE, 0x00, 0x01, 0x7F, 0xF0, 0xFD, 0x80};
        for (int64_t i = 0; i < rows * nb; ++i) {
            if (int4) {
                const uint16_t v = int4_scales[i / nb];
                scales[size_t(2 * i)] = uint8_t(v);
                scales[size_t(2 * i + 1)] = uint8_t(v >> 8);
            } else {
                scales[size_t(i)] = mx_scales[i / nb];
            }
        }
        const Weight w{f, rows, cols, data.data(), scales.data()};
        std::vector<float> x(size_t(n * cols));
        for (auto& v : x) v = float(int(rng() % 7) - 3) * 0.25f;
        for (auto p : ops::available_cpu_paths()) {
            ops::set_cpu_path(p);
            batched_and_alone(w, x.data(), n, pool, [&](float b, float a, int64_t i, int64_t r) {
                EXPECT_TRUE((std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, 4) == 0)
                    << label(f, p) << " input " << i << " row " << r << ": " << a << " vs " << b;
            });
        }
    }
}

// `count` draws of N(0, 1).
std::vector<float> normal_values(size_t count, std::mt19937& rng) {
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> v(count);
    for (auto& e : v) e = d(rng);
    return v;
}

// Every row of a 37-row batch equals the same row computed alone, inside a 32-row batch at another position,
// and with one or two threads; rows = 300 leaves a short 12-row panel at the end.
TEST(MatmulExact, RowsBitIdenticalWhateverBatchAndThreads) {
    PathGuard guard;
    const int64_t rows = 300, cols = 1024, n = 37;
    std::mt19937 rng(5);
    const std::vector<float> src = normal_values(size_t(rows * cols), rng), x = normal_values(size_t(n * cols), rng);
    ThreadPool one(1), two(2);
    for (WeightFormat f : kFormats) {
        const auto q = quantize(src.data(), rows, cols, f);
        for (auto p : ops::available_cpu_paths()) {
            ops::set_cpu_path(p);
            std::vector<float> all(size_t(n * rows)), all1(size_t(n * rows)), sub(size_t(32 * rows));
            ops::cpu::matmul(q.view(), x.data(), n, all.data(), two);
            ops::cpu::matmul(q.view(), x.data(), n, all1.data(), one);
            EXPECT_EQ(0, std::memcmp(all.data(), all1.data(), all.size() * 4)) << label(f, p) << " threads";
            ops::cpu::matmul(q.view(), x.data() + 5 * cols, 32, sub.data(), two);
            EXPECT_EQ(0, std::memcmp(sub.data(), all.data() + 5 * rows, sub.size() * 4)) << label(f, p) << " n=32";
            for (int64_t i : {0, 4, 5, 17, 36}) {
                std::vector<float> alone(static_cast<size_t>(rows));
                ops::cpu::matmul(q.view(), x.data() + i * cols, 1, alone.data(), two);
                EXPECT_EQ(0, std::memcmp(alone.data(), all.data() + i * rows, size_t(rows) * 4))
                    << label(f, p) << " n=1 row " << i;
            }
        }
    }
}

// A batch large enough that the AMX kernel splits the columns into several ranges (its activation tiles for all
// columns would not fit the L2: 160 inputs x 2048 columns are 30 groups x 64 k-tiles x 1 KB), with the output
// tiles of every row set parked in memory between ranges: still every row equals the row computed alone.
TEST(MatmulExact, RowsBitIdenticalAcrossColumnRanges) {
    PathGuard guard;
    const int64_t rows = 40, cols = 2048, n = 160;
    std::mt19937 rng(11);
    const std::vector<float> src = normal_values(size_t(rows * cols), rng), x = normal_values(size_t(n * cols), rng);
    ThreadPool two(2);
    for (WeightFormat f : {WeightFormat::BF16, WeightFormat::MXFP4, WeightFormat::INT4_G32}) {
        const auto q = quantize(src.data(), rows, cols, f);
        for (auto p : ops::available_cpu_paths()) {
            ops::set_cpu_path(p);
            std::vector<float> all(size_t(n * rows)), alone(static_cast<size_t>(rows));
            ops::cpu::matmul(q.view(), x.data(), n, all.data(), two);
            for (int64_t i : {int64_t(0), int64_t(1), int64_t(77), n - 1}) {
                ops::cpu::matmul(q.view(), x.data() + i * cols, 1, alone.data(), two);
                EXPECT_EQ(0, std::memcmp(alone.data(), all.data() + i * rows, size_t(rows) * 4))
                    << label(f, p) << " n=1 row " << i;
            }
        }
    }
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// bench's compute limit counts 2 * n * rows * cols per ops::matmul call (through a context), and nothing for none.
TEST(MatmulFlops, CountedPerCallThroughTheContext) {
    const int64_t rows = 5, cols = 64, n = 3;
    std::vector<float> src(size_t(rows * cols), 0.25f), x(size_t(n * cols), 1.0f), y(size_t(n * rows));
    const QuantizedWeight q = quantize(src.data(), rows, cols, WeightFormat::BF16);
    ExecContext ctx(1);
    const double before = phase_times::matmul_flops();
    ops::matmul(q.view(), x.data(), n, y.data(), ctx);
    EXPECT_EQ(phase_times::matmul_flops() - before, 2.0 * n * rows * cols);
    ops::matmul(q.view(), x.data(), 0, y.data(), ctx);
    EXPECT_EQ(phase_times::matmul_flops() - before, 2.0 * n * rows * cols);
    EXPECT_EQ(y[0], 16.0f);  // the call did run: 64 * 0.25
}

}  // namespace
}  // namespace sluice
