// exp and tanh in plain float arithmetic with no branches and no library calls, so a loop over them vectorises
// (libm's expf and tanhf are calls, one element at a time: Kimi K3's SiTU activation, two tanh and one exp an
// element, was 8.5% of a K3-slice prefill's samples in `perf`, most of it in tanhf's expm1f). The same inline code
// runs on every CPU path, so every path keeps the same bits. Accuracy: within a few ulp of the exact value
// (tests/unit/test_vec_math.cpp checks 4 ulp-equivalents against double over the whole range used).
#pragma once

#include <bit>
#include <cstdint>

namespace sluice::ops::cpu {

// e^x: x = n ln 2 + r with |r| <= ln 2 / 2 (Cody-Waite, two constants), e^r by its Taylor series to r^7 (the next
// term is below 2^-29 relative there), times 2^n built in the exponent bits. x above 88.73 gives +inf, below
// -87.33 gives 0 (no subnormal results), NaN gives NaN.
inline float exp_f32(float x) {
    const float xc = x < -88.0f ? -88.0f : (x > 89.0f ? 89.0f : x);  // NaN passes through both compares
    const float shifter = 12582912.0f;                                   // 1.5 * 2^23: rounds to an integer
    const float t = xc * 1.44269504088896341f + shifter;
    const float n = t - shifter;
    const float r = (xc - n * 0.693145751953125f) - n * 1.42860682030941723e-6f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    // n in [-127, 129]: 2^n as two factors so that neither leaves the normal range (2^129 overflows to inf, as it should)
    const int32_t ni = int32_t(std::bit_cast<uint32_t>(t) - std::bit_cast<uint32_t>(shifter));  // the integer in t's low mantissa bits
    const int32_t n1 = ni / 2, n2 = ni - n1;
    const float s1 = std::bit_cast<float>(uint32_t(n1 + 127) << 23), s2 = std::bit_cast<float>(uint32_t(n2 + 127) << 23);
    const float y = p * s1 * s2;
    return x != x ? x : (x < -87.33654475f ? 0.0f : y);
}

// tanh x: an odd polynomial (least squares in x^2, relative error 4e-9 before rounding) below 0.6, where
// 1 - 2 / (e^2|x| + 1) would lose digits; above, that form, which saturates to 1 on its own.
inline float tanh_f32(float x) {
    const float a = x < 0.0f ? -x : x;
    const float t = a * a;
    float q = -0.005898835137486458f;
    q = q * t + 0.020797746255993843f;
    q = q * t - 0.0537835918366909f;
    q = q * t + 0.13331902027130127f;
    q = q * t - 0.33333295583724976f;
    const float small = a + a * (t * q);
    const float large = 1.0f - 2.0f / (exp_f32(2.0f * a) + 1.0f);
    const float m = a < 0.6f ? small : large;
    return x != x ? x : (x < 0.0f ? -m : m);
}

}  // namespace sluice::ops::cpu
