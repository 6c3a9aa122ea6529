// ops/cpu/vec_math.h against double precision: exp_f32 and tanh_f32 within 4 ulp-equivalents (4 * 2^-24 of the
// exact value, relative) over every float they are used on, and the edges (saturation, overflow, NaN) as libm's.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "ops/cpu/vec_math.h"

using namespace sluice::ops::cpu;

namespace {
constexpr double kTol = 4.0 / 16777216.0;  // 4 * 2^-24

double rel(double got, double want) { return std::fabs(got - want) / std::fabs(want); }

// Every float of [lo, hi] stepped by `step` floats (a dense sample of every binade).
template <class F>
void sweep(float lo, float hi, uint32_t step, F&& check) {
    for (float x = lo; x < hi;) {
        check(x);
        uint32_t u = std::bit_cast<uint32_t>(x);
        const float next = x >= 0 ? std::bit_cast<float>(u + step) : (u - step > 0x80000000u ? std::bit_cast<float>(u - step) : 0.0f);
        if (!(next > x)) break;
        x = next;
    }
}
}  // namespace

TEST(VecMath, ExpWithinFourUlpOverItsNormalRange) {
    double worst = 0;
    float at = 0;
    sweep(-87.33f, 88.72f, 97, [&](float x) {
        const double e = rel(exp_f32(x), std::exp(double(x)));
        if (e > worst) worst = e, at = x;
    });
    EXPECT_LE(worst, kTol) << "at x = " << at;
}

TEST(VecMath, ExpEdges) {
    const float inf = std::numeric_limits<float>::infinity();
    EXPECT_EQ(exp_f32(0.0f), 1.0f);
    EXPECT_EQ(exp_f32(89.0f), inf);
    EXPECT_EQ(exp_f32(1000.0f), inf);
    EXPECT_EQ(exp_f32(inf), inf);
    EXPECT_EQ(exp_f32(-88.0f), 0.0f);  // below the normal range: 0, never a wrong normal number
    EXPECT_EQ(exp_f32(-inf), 0.0f);
    EXPECT_TRUE(std::isnan(exp_f32(std::nanf(""))));
    EXPECT_LE(rel(exp_f32(88.7f), std::exp(double(88.7f))), kTol);    // the largest finite results
    EXPECT_LE(rel(exp_f32(-87.3f), std::exp(double(-87.3f))), kTol);  // the smallest normal ones
}

TEST(VecMath, TanhWithinFourUlpEverywhere) {
    double worst = 0;
    float at = 0;
    auto check = [&](float x) {
        const double e = rel(tanh_f32(x), std::tanh(double(x)));
        if (e > worst) worst = e, at = x;
    };
    sweep(-20.0f, -1e-30f, 61, check);
    sweep(1e-30f, 20.0f, 61, check);
    EXPECT_LE(worst, kTol) << "at x = " << at;
}

TEST(VecMath, TanhEdges) {
    const float inf = std::numeric_limits<float>::infinity();
    EXPECT_EQ(tanh_f32(0.0f), 0.0f);
    EXPECT_EQ(tanh_f32(inf), 1.0f);
    EXPECT_EQ(tanh_f32(-inf), -1.0f);
    EXPECT_EQ(tanh_f32(50.0f), 1.0f);
    EXPECT_EQ(tanh_f32(-50.0f), -1.0f);
    EXPECT_EQ(tanh_f32(1e-20f), 1e-20f);
    EXPECT_TRUE(std::isnan(tanh_f32(std::nanf(""))));
    EXPECT_LE(rel(tanh_f32(0.59999f), std::tanh(double(0.59999f))), kTol);  // both sides of the switch
    EXPECT_LE(rel(tanh_f32(0.6f), std::tanh(double(0.6f))), kTol);
}
