// Quantise -> dequantise round trips and hand-packed blocks with known values for every weight format: the E2M1
// code table and tie rounding, E8M0 edge cases, FP8 subnormals and saturation, INT4 -8..7 nibble order, and the
// ggml block layouts (Q8_0, Q4_K scale unpacking, Q6_K with d last, MXFP4_GGML nibble order).
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "ops/ops.h"
#include "ops/quantize.h"
#include "ops/reference/dequantize_detail.h"

namespace sluice {
namespace {

std::vector<float> deq(const Weight& w, int64_t r) {
    std::vector<float> out(static_cast<size_t>(w.cols));
    ops::ref::dequantize_row(w, r, out.data());
    return out;
}

std::vector<float> uniform(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = d(rng);
    return v;
}

void put_f16(uint8_t* p, float v) {
    const uint16_t h = f32_to_f16(v);
    std::memcpy(p, &h, 2);
}

TEST(Quantize, E2M1CodeTableRoundTripsExactlyAtAnyScale) {
    for (int k : {-126, -3, 0, 5, 120}) {
        std::vector<float> x(32);
        for (int i = 0; i < 32; ++i) x[size_t(i)] = std::ldexp(ops::ref::kE2M1Values[i % 16], k);
        for (WeightFormat f : {WeightFormat::MXFP4, WeightFormat::MXFP4_GGML}) {
            const auto q = quantize(x.data(), 1, 32, f);
            EXPECT_EQ(f == WeightFormat::MXFP4 ? q.scales[0] : q.data[0], uint8_t(127 + k));
            const auto y = deq(q.view(), 0);
            for (int i = 0; i < 32; ++i) {
                EXPECT_EQ(y[size_t(i)], x[size_t(i)]) << "k " << k << " i " << i;
                EXPECT_EQ(std::signbit(y[size_t(i)]), std::signbit(x[size_t(i)]));
            }
        }
    }
}

TEST(Quantize, E2M1RoundsToNearestEvenAndSaturates) {
    struct Case { float v; uint8_t code; };
    for (Case c : {Case{0.25f, 0}, Case{0.26f, 1}, Case{0.75f, 2}, Case{1.25f, 2}, Case{1.75f, 4}, Case{2.5f, 4},
                   Case{3.5f, 6}, Case{5.0f, 6}, Case{5.1f, 7}, Case{7.0f, 7}, Case{1e30f, 7}, Case{-0.25f, 8},
                   Case{-2.9f, 13}, Case{-6.5f, 15}})
        EXPECT_EQ(f32_to_e2m1(c.v), c.code) << c.v;
}

TEST(Quantize, E8M0EdgeCases) {
    EXPECT_EQ(ops::ref::e8m0_value(0), std::ldexp(1.0f, -127));
    EXPECT_EQ(ops::ref::e8m0_value(1), std::ldexp(1.0f, -126));
    EXPECT_EQ(ops::ref::e8m0_value(127), 1.0f);
    EXPECT_EQ(ops::ref::e8m0_value(254), std::ldexp(1.0f, 127));
    EXPECT_TRUE(std::isnan(ops::ref::e8m0_value(255)));
    EXPECT_EQ(mxfp4_shared_exponent(6.0f), 127);    // floor(log2 6) - 2 = 0
    EXPECT_EQ(mxfp4_shared_exponent(7.9f), 127);    // 7.9 / 1 saturates to 6: the OCP rule's known clipping
    EXPECT_EQ(mxfp4_shared_exponent(1.0f), 125);
    EXPECT_EQ(mxfp4_shared_exponent(0.0f), 0);
    EXPECT_EQ(mxfp4_shared_exponent(1e-45f), 0);    // subnormal amax: exponent clamps at -127
    EXPECT_EQ(mxfp4_shared_exponent(FLT_MAX), 252);
    // Scale byte 0 with code 1 (0.5) is 2^-128, a float subnormal: kept exactly, on every path.
    const uint8_t packed[16] = {0x21};  // element 0 = code 1, element 1 = code 2
    const uint8_t scale = 0;
    const Weight w{WeightFormat::MXFP4, 1, 32, packed, &scale};
    for (auto p : ops::available_cpu_paths()) {
        ops::set_cpu_path(p);
        std::vector<float> y(32);
        ops::dequantize_row(w, 0, y.data());
        EXPECT_EQ(y[0], std::ldexp(1.0f, -128));
        EXPECT_EQ(y[1], std::ldexp(1.0f, -127));
        EXPECT_EQ(y[2], 0.0f);
    }
    ops::set_cpu_path(ops::available_cpu_paths().back());
}

// compressed-tensors weight_packed [out, in/2] and gpt-oss *_blocks [out, in/32, 16] are the same bytes per row:
// byte j of block g holds element 32g + 2j (low nibble) and 32g + 2j + 1 (high nibble).
TEST(Quantize, Mxfp4NibbleOrderMatchesGptOssBlocks) {
    uint8_t blocks[2][2][16];  // [rows][n_blocks][16]
    const uint8_t scales[2][2] = {{127, 128}, {126, 127}};
    for (int r = 0; r < 2; ++r)
        for (int g = 0; g < 2; ++g)
            for (int j = 0; j < 16; ++j) blocks[r][g][j] = uint8_t(((j + g + r) % 16) | (((15 - j) % 16) << 4));
    const Weight w{WeightFormat::MXFP4, 2, 64, &blocks[0][0][0], &scales[0][0]};
    for (int r = 0; r < 2; ++r) {
        const auto y = deq(w, r);
        for (int g = 0; g < 2; ++g)
            for (int j = 0; j < 16; ++j) {
                const float s = std::ldexp(1.0f, scales[r][g] - 127);
                EXPECT_EQ(y[size_t(32 * g + 2 * j)], ops::ref::kE2M1Values[blocks[r][g][j] & 15] * s);
                EXPECT_EQ(y[size_t(32 * g + 2 * j + 1)], ops::ref::kE2M1Values[blocks[r][g][j] >> 4] * s);
            }
    }
}

TEST(Quantize, Mxfp4GgmlNibbleOrderAndSameValuesAsMxfp4) {
    uint8_t block[17] = {128};
    for (int j = 0; j < 16; ++j) block[1 + j] = uint8_t(j | ((15 - j) << 4));
    const Weight w{WeightFormat::MXFP4_GGML, 1, 32, block, nullptr};
    const auto y = deq(w, 0);
    for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(y[size_t(j)], 2.0f * ops::ref::kE2M1Values[j]);
        EXPECT_EQ(y[size_t(j + 16)], 2.0f * ops::ref::kE2M1Values[15 - j]);
    }
    const auto x = uniform(4 * 96, 1);
    const auto a = quantize(x.data(), 4, 96, WeightFormat::MXFP4), b = quantize(x.data(), 4, 96, WeightFormat::MXFP4_GGML);
    for (int r = 0; r < 4; ++r) EXPECT_EQ(deq(a.view(), r), deq(b.view(), r));
}

TEST(Quantize, Int4PackedWordsLsbFirstMinus8) {
    // Word 0 holds stored values 0..7 (q = -8..-1), word 1 holds 8..15 (q = 0..7); scale 0.5 for the group.
    uint32_t words[4] = {0x76543210u, 0xFEDCBA98u, 0x00000000u, 0x88888888u};
    const uint16_t scale = f32_to_bf16(0.5f);
    const Weight w{WeightFormat::INT4_G32, 1, 32, reinterpret_cast<const uint8_t*>(words),
                   reinterpret_cast<const uint8_t*>(&scale)};
    for (auto p : ops::available_cpu_paths()) {
        ops::set_cpu_path(p);
        std::vector<float> y(32);
        ops::dequantize_row(w, 0, y.data());
        for (int c = 0; c < 16; ++c) EXPECT_EQ(y[size_t(c)], float(c - 8) * 0.5f) << ops::cpu_path_name(p);
        for (int c = 16; c < 24; ++c) EXPECT_EQ(y[size_t(c)], -4.0f);
        for (int c = 24; c < 32; ++c) EXPECT_EQ(y[size_t(c)], 0.0f);
    }
    ops::set_cpu_path(ops::available_cpu_paths().back());
    // Quantiser: symmetric amax/7, so q*s for q in -7..7 comes back exactly.
    std::vector<float> x(32);
    for (int i = 0; i < 32; ++i) x[size_t(i)] = float(i % 15 - 7) * 0.25f;
    const auto q = quantize(x.data(), 1, 32, WeightFormat::INT4_G32);
    EXPECT_EQ(bf16_to_f32(uint16_t(q.scales[0] | q.scales[1] << 8)), 0.25f);
    EXPECT_EQ(deq(q.view(), 0), x);
}

// compressed-tensors dequantises in the scale's dtype: q * scale rounded to bf16, ties to even. Scale 1 + 3/128
// (bf16 0x3F83) times 3 is 3.0703125, halfway between bf16 3.0625 and 3.078125: to even gives 3.0625; scale
// 1 + 1/128 times 3 is 3.0234375, halfway between 3.015625 and 3.03125: to even gives 3.03125; times 7 is
// 7.0546875, nearest 7.0625; 7 * (1 + 3/128) = 7.1640625, nearest 7.15625. Every path (dequantise and matmul)
// must give these values.
TEST(Quantize, Int4ValueIsBf16RoundedProduct) {
    const uint32_t codes = 0xF1B5u;  // elements 0..3 hold stored codes 5, 11, 1, 15: q = -3, 3, -7, 7
    uint32_t words[8] = {codes, codes, codes, codes, 0, 0, 0, 0};
    const uint16_t scales[2] = {0x3F83, 0x3F81};
    std::memcpy(words + 4, words, 16);
    const Weight w{WeightFormat::INT4_G32, 1, 64, reinterpret_cast<const uint8_t*>(words),
                   reinterpret_cast<const uint8_t*>(scales)};
    const float want0[4] = {-3.0625f, 3.0625f, -7.15625f, 7.15625f};  // 7 * (1 + 3/128) = 7.1640625 -> 7.15625
    const float want1[4] = {-3.03125f, 3.03125f, -7.0625f, 7.0625f};
    ThreadPool pool(2);
    for (auto p : ops::available_cpu_paths()) {
        ops::set_cpu_path(p);
        std::vector<float> y(64);
        ops::dequantize_row(w, 0, y.data());
        for (int c = 0; c < 4; ++c) {
            EXPECT_EQ(y[size_t(c)], want0[c]) << ops::cpu_path_name(p) << c;
            EXPECT_EQ(y[size_t(32 + c)], want1[c]) << ops::cpu_path_name(p) << c;
        }
        for (int c = 0; c < 64; ++c) {  // matmul with unit vectors picks the same values out
            std::vector<float> x(64, 0.0f);
            x[size_t(c)] = 1.0f;
            float out = 0;
            ops::cpu::matmul(w, x.data(), 1, &out, pool);
            EXPECT_EQ(out, y[size_t(c)]) << ops::cpu_path_name(p) << " column " << c;
        }
    }
    ops::set_cpu_path(ops::available_cpu_paths().back());
}

TEST(Quantize, Fp8AllCodesSubnormalsAndSaturation) {
    for (int c = 0; c < 256; ++c) {
        if ((c & 0x7F) == 0x7F) continue;
        EXPECT_EQ(f32_to_fp8_e4m3(fp8_e4m3_to_f32(uint8_t(c))), c) << c;
    }
    EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
    EXPECT_EQ(fp8_e4m3_to_f32(0x07), 7 * std::ldexp(1.0f, -9));
    EXPECT_EQ(fp8_e4m3_to_f32(0x08), std::ldexp(1.0f, -6));
    EXPECT_EQ(fp8_e4m3_to_f32(0x7E), 448.0f);
    EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(1.0f, -10)), 0x00);       // tie with 0 -> even
    EXPECT_EQ(f32_to_fp8_e4m3(1.5f * std::ldexp(1.0f, -9)), 0x02);  // tie 1 vs 2 -> even
    EXPECT_EQ(f32_to_fp8_e4m3(-std::ldexp(1.0f, -9)), 0x81);
    EXPECT_EQ(f32_to_fp8_e4m3(464.0f), 0x7E);
    EXPECT_EQ(f32_to_fp8_e4m3(1e9f), 0x7E);
    EXPECT_EQ(f32_to_fp8_e4m3(NAN), 0x7F);
    // Block quantiser: ragged 130x130 -> 2x2 scale tiles of amax/448; 3 mantissa bits -> relative error <= 1/16.
    const auto x = uniform(130 * 130, 2);
    const auto q = quantize(x.data(), 130, 130, WeightFormat::FP8_E4M3_B128);
    ASSERT_EQ(q.scales.size(), 16u);
    for (int r = 0; r < 130; ++r) {
        const auto y = deq(q.view(), r);
        for (int c = 0; c < 130; ++c) {
            const float v = x[size_t(r * 130 + c)];
            EXPECT_LE(std::fabs(y[size_t(c)] - v), std::fabs(v) / 16 + std::ldexp(1.0f, -10)) << r << "," << c;
        }
    }
}

TEST(Quantize, Q8_0KnownBlockAndRoundTrip) {
    uint8_t block[34];
    put_f16(block, 0.25f);
    for (int i = 0; i < 32; ++i) block[2 + i] = uint8_t(int8_t(i * 8 - 128));
    const auto y = deq(Weight{WeightFormat::Q8_0, 1, 32, block, nullptr}, 0);
    for (int i = 0; i < 32; ++i) EXPECT_EQ(y[size_t(i)], float(i * 8 - 128) * 0.25f);
    const auto x = uniform(3 * 64, 3);
    const auto q = quantize(x.data(), 3, 64, WeightFormat::Q8_0);
    for (int r = 0; r < 3; ++r) {
        const auto d = deq(q.view(), r);
        for (int c = 0; c < 64; ++c) EXPECT_LE(std::fabs(d[size_t(c)] - x[size_t(r * 64 + c)]), 1.0f / 254 + 1e-3f);
    }
}

TEST(Quantize, Q4_KScaleUnpackingAndRoundTrip) {
    uint8_t b[144] = {};
    put_f16(b, 1.0f);
    put_f16(b + 2, 0.5f);
    const int sc[8] = {1, 2, 3, 63, 17, 33, 48, 60}, mn[8] = {0, 5, 62, 7, 40, 9, 16, 63};
    for (int j = 0; j < 4; ++j) {
        b[4 + j] = uint8_t(sc[j] | ((sc[j + 4] >> 4) << 6));
        b[8 + j] = uint8_t(mn[j] | ((mn[j + 4] >> 4) << 6));
        b[12 + j] = uint8_t((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
    }
    for (int i = 0; i < 128; ++i) b[16 + i] = uint8_t((i * 7) & 0xFF);
    const auto y = deq(Weight{WeightFormat::Q4_K, 1, 256, b, nullptr}, 0);
    for (int c = 0; c < 4; ++c)
        for (int l = 0; l < 32; ++l) {
            const int q = (32 * c + l) * 7 & 0xFF;
            EXPECT_EQ(y[size_t(64 * c + l)], float(sc[2 * c] * (q & 15)) - 0.5f * float(mn[2 * c]));
            EXPECT_EQ(y[size_t(64 * c + 32 + l)], float(sc[2 * c + 1] * (q >> 4)) - 0.5f * float(mn[2 * c + 1]));
        }
    const auto x = uniform(2 * 512, 4);
    const auto q = quantize(x.data(), 2, 512, WeightFormat::Q4_K);
    for (int r = 0; r < 2; ++r) {
        const auto d = deq(q.view(), r);
        for (int c = 0; c < 512; ++c) EXPECT_LE(std::fabs(d[size_t(c)] - x[size_t(r * 512 + c)]), 0.1f) << c;
    }
}

TEST(Quantize, Q6_KDLastAndRoundTrip) {
    uint8_t b[210] = {};
    put_f16(b + 208, 0.5f);
    for (int j = 0; j < 16; ++j) b[192 + j] = uint8_t(int8_t(j - 8));
    b[0] = 0x21;    // element 0 low 4 bits 1, element 64 low 4 bits 2
    b[128] = 0xE4;  // high 2 bits: element 0 -> 0, element 32 -> 1, element 64 -> 2, element 96 -> 3
    const auto y = deq(Weight{WeightFormat::Q6_K, 1, 256, b, nullptr}, 0);
    EXPECT_EQ(y[0], 0.5f * -8 * float(1 - 32));
    EXPECT_EQ(y[32], 0.5f * -6 * float(16 - 32));
    EXPECT_EQ(y[64], 0.5f * -4 * float(2 + 32 - 32));
    EXPECT_EQ(y[96], 0.5f * -2 * float(48 - 32));
    EXPECT_EQ(y[128], 0.5f * 0 * float(-32));
    const auto x = uniform(2 * 512, 5);
    const auto q = quantize(x.data(), 2, 512, WeightFormat::Q6_K);
    for (int r = 0; r < 2; ++r) {
        const auto d = deq(q.view(), r);
        for (int c = 0; c < 512; ++c) EXPECT_LE(std::fabs(d[size_t(c)] - x[size_t(r * 512 + c)]), 0.03f) << c;
    }
}

}  // namespace
}  // namespace sluice
