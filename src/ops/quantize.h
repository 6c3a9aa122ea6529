// Reference quantisers: f32 matrices to every WeightFormat, for tests, benchmarks and `sluice synth`. Plain and
// deterministic, not tuned for error (no ggml-style scale search). The rules, per format:
//   FP8_E4M3_B128  scale = amax/448 per 128x128 tile (1 if amax = 0), q = e4m3(x/scale), round-to-nearest-even,
//                  saturating to +-448; NaN stays NaN.
//   MXFP4(_GGML)   OCP MX: shared_exp = floor(log2(amax)) - 2 clamped to [-127, 127] (amax = 0: byte 0), elements
//                  round-to-nearest-even to E2M1, saturating to +-6. A block containing NaN gets scale 0xFF.
//   INT4_G32       symmetric, scale = bf16(amax/7) per 32 (q in -7..7; -8 is never produced), q = round(x/scale).
//   Q8_0           d = amax/127 (stored f16), q = round(x/d) with ties away from zero (ggml's roundf).
//   Q4_K           per 32: min = min(0, min x), step = (max - min)/15; steps and mins to 6 bits against the
//                  super-block's d = max step/63, dmin = max min/63; q = round((x + m)/step) clamped to 0..15.
//   Q6_K           per 16: s = amax/31.5 -> int8 scales against d = max|s|/127; q = round(x/(d*sc)) in -32..31.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/weight.h"

namespace sluice {

// Owns the bytes behind a Weight.
struct QuantizedWeight {
    WeightFormat format = WeightFormat::F32;
    int64_t rows = 0, cols = 0;
    std::vector<uint8_t> data;
    std::vector<uint8_t> scales;

    Weight view() const { return Weight{format, rows, cols, data.data(), scales.empty() ? nullptr : scales.data()}; }
};

// w: [rows, cols] f32 row-major. Throws sluice::Error if cols does not suit the format (Weight::check rules).
QuantizedWeight quantize(const float* w, int64_t rows, int64_t cols, WeightFormat format);

// Element encoders (round to nearest, ties to even code, saturating).
uint8_t f32_to_e2m1(float v);       // 4-bit code
uint8_t f32_to_fp8_e4m3(float v);   // float8_e4m3fn byte
uint8_t mxfp4_shared_exponent(float amax);  // E8M0 byte of the OCP shared scale

}  // namespace sluice
