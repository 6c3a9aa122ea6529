// The format switch every SIMD matmul path's Kernel::decode shares, instantiated per ISA translation unit with
// that ISA's decoders (each of the form void(const Weight&, int64_t r, int64_t c0, int64_t k, float* out)).
#pragma once

#include <cstdint>
#include <cstring>

#include "ops/reference/dequantize_detail.h"
#include "ops/weight.h"

namespace sluice::ops::cpu {
// Unnamed: each ISA's file compiles its own copy with its own -m flags, and the linker must never merge an AVX-512
// instantiation into the portable path (one shared inline symbol would let it pick either).
namespace {

// Columns [c0, c0+k) of row r as f32: F32 copied, Q4_K/Q6_K through the reference block decoders, the rest
// through the given decoders (compile-time constants, so the calls are direct).
template <auto Bits16, auto Fp8, auto Nibbles, auto Mxfp4Ggml, auto Q8>
void decode_by_format(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out) {
    switch (w.format) {
        case WeightFormat::F32:
            std::memcpy(out, w.data + (uint64_t(r) * uint64_t(w.cols) + uint64_t(c0)) * 4, size_t(k) * 4);
            return;
        case WeightFormat::F16:
        case WeightFormat::BF16: return Bits16(w, r, c0, k, out);
        case WeightFormat::FP8_E4M3_B128: return Fp8(w, r, c0, k, out);
        case WeightFormat::MXFP4:
        case WeightFormat::INT4_G32: return Nibbles(w, r, c0, k, out);
        case WeightFormat::MXFP4_GGML: return Mxfp4Ggml(w, r, c0, k, out);
        case WeightFormat::Q8_0: return Q8(w, r, c0, k, out);
        case WeightFormat::Q4_K:
        case WeightFormat::Q6_K: return ref::dequantize_range(w, r, c0, k, out);
    }
}

}  // namespace
}  // namespace sluice::ops::cpu
