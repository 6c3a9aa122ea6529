// INT4_G32's weight values without a multiply and a rounding per block. A weight is bf16(q * s) for a code q in
// -8..7 and the block's bf16 scale s (compressed-tensors dequantises in the scale's dtype). For a scale whose
// exponent field e is 1..250, s = ±(1 + m/128) 2^(e-127), and
//
//     bf16(q s) = bf16(q (1 + m/128)) * (±2^(e-127))   exactly,
//
// because q (1 + m/128) has at most 12 significant bits (exact in f32), both sides stay normal floats (|q| <= 8,
// so |q s| < 16 2^(e-127) <= 2^127; and |q s| >= 2^(e-127) >= 2^-126 for q != 0), and rounding to 8 significant
// bits commutes with a power of two. The zero code gives +0 times ±2^(e-127): -0 for a negative scale, as q s does.
// So a kernel looks the block's 16 values up in the table of its scale's mantissa m (rounded once, here) and
// multiplies by the scale's sign and exponent alone: what MXFP4 already costs. Scales outside that range (zero,
// subnormal, huge, Inf, NaN) take the kernels' exact multiply-and-round instead; the bits are the same either way
// (Ops.Int4ScalesOfEveryExponentSameBitsOnEveryPath).
#pragma once

#include <bit>
#include <cstdint>

namespace sluice::ops::cpu {

struct Int4MantissaTables {
    alignas(64) float values[128][16];     // bf16((k - 8) (1 + m/128)) for code k, as f32
    alignas(64) uint8_t bf16_lo[128][16];  // the same values' bf16 low bytes (byte tables for vpshufb)
    alignas(64) uint8_t bf16_hi[128][16];  // and high bytes
};

constexpr Int4MantissaTables make_int4_mantissa_tables() {
    Int4MantissaTables t{};
    for (int m = 0; m < 128; ++m)
        for (int k = 0; k < 16; ++k) {
            const float exact = float(k - 8) * (1.0f + float(m) / 128.0f);  // exact: 12 significant bits at most
            const uint32_t b = std::bit_cast<uint32_t>(exact);
            const uint32_t r = (b + 0x7FFFu + ((b >> 16) & 1u)) & 0xFFFF0000u;  // round to nearest even bf16
            t.values[m][k] = std::bit_cast<float>(r);
            t.bf16_lo[m][k] = uint8_t(r >> 16);
            t.bf16_hi[m][k] = uint8_t(r >> 24);
        }
    return t;
}

inline constexpr Int4MantissaTables kInt4Mantissa = make_int4_mantissa_tables();

// True when a bf16 scale's exponent field is 1..250 (the table form is exact); its mantissa is bits & 0x7F.
inline bool int4_scale_in_table_range(uint16_t scale_bits) { return unsigned((scale_bits >> 7) & 0xFF) - 1u < 250u; }
// The scale's sign and exponent as an f32's bits: ±2^(e-127).
inline uint32_t int4_scale_power_bits(uint16_t scale_bits) { return uint32_t(scale_bits & 0xFF80u) << 16; }

}  // namespace sluice::ops::cpu
