// Deterministic random tensor contents for synthesized checkpoints. Every value is a pure function of
// (seed, tensor name, element index) through a counter-based splitmix64 hash, so tensors can be generated in
// any order, in parallel, on any number of threads, and come out byte-identical.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "formats/safetensors_writer.h"

namespace sluice::synth {

inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// The per-tensor key: seed and the tensor's name (not its position), so a tensor's bytes do not change when
// other tensors are added or removed.
uint64_t tensor_key(uint64_t seed, std::string_view name);

// Counter-based stream: the i-th 64-bit word of tensor `key`.
inline uint64_t random_word(uint64_t key, uint64_t i) { return mix64(key + (i + 1) * 0x9e3779b97f4a7c15ull); }

// BF16 / F32 / F16 values uniform in [center - half_width, center + half_width).
TensorFill uniform_fill(DType dtype, uint64_t key, float center, float half_width);
// F8_E4M3 codes of values uniform in [-448, 448] (the range a per-block amax/448 scale maps weights onto).
TensorFill fp8_e4m3_fill(uint64_t key);
// Uniformly random bits for any dtype (packed INT4 words, packed FP4 nibbles).
TensorFill random_bits_fill(uint64_t key);
// E8M0 bytes 127 + exponent or 127 + exponent - 1, chosen at random.
TensorFill e8m0_fill(uint64_t key, int exponent);
// Fixed I32 values (e.g. compressed-tensors weight_shape).
TensorFill int32_values_fill(std::vector<int32_t> values);

// Nearest float8_e4m3fn code for x (saturating to +-448, round half to even).
uint8_t f32_to_fp8_e4m3(float x);

}  // namespace sluice::synth
