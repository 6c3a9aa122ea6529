// Binding checkpoint tensors to Weights with shape and dtype checks: one place that knows how each format is
// spelled in safetensors (plain F32/BF16/F16 `.weight`; FP8 `.weight` + `.weight_scale_inv`; compressed-tensors
// `.weight_packed` + `.weight_scale` for MXFP4 (U8) and INT4 (I32); gpt-oss `_blocks` + `_scales`). Errors name the tensor, expected and actual.
#pragma once

#include <string>
#include <vector>

#include "experts/expert_source.h"
#include "formats/checkpoint.h"
#include "ops/weight.h"

namespace sluice {

// A linear layer's weight: `prefix` is e.g. "model.layers.3.self_attn.q_a_proj" (without ".weight").
Weight bind_linear(const Checkpoint& ck, const std::string& prefix, int64_t rows, int64_t cols);

// A plain float tensor (F32/BF16/F16) as a Weight of [rows, cols], e.g. embeddings.
Weight bind_matrix(const Checkpoint& ck, const std::string& name, int64_t rows, int64_t cols);

// A stacked [n, rows, cols] float tensor (fused experts) viewed as one [n*rows, cols] Weight.
Weight bind_stacked(const Checkpoint& ck, const std::string& name, int64_t n, int64_t rows, int64_t cols);

// gpt-oss MXFP4 experts: `<prefix>_blocks` U8 [n, rows, cols/32, 16] + `<prefix>_scales` U8 [n, rows, cols/32]
// (E8M0) viewed as one MXFP4 Weight of [n*rows, cols]; each expert is a row slice (weight_rows).
Weight bind_mxfp4_stacked(const Checkpoint& ck, const std::string& prefix, int64_t n, int64_t rows, int64_t cols);

// The fused expert tensors transformers 5 writes under `prefix` (`gate_up_proj` [E, 2I, H]: gate rows, then up
// rows; `down_proj` [E, H, I]) as per-expert views; empty if the checkpoint has no `prefix + "gate_up_proj"`.
std::vector<ExpertWeights> bind_fused_experts(const Checkpoint& ck, const std::string& prefix, int64_t n_experts,
                                              int64_t inter, int64_t hidden);

// Rows [row0, row0 + n) of a bound weight, e.g. one expert's slice of a fused tensor. Only formats whose rows are
// independent (not FP8 128-row blocks unless row0 and n are multiples of 128).
Weight weight_rows(const Weight& w, int64_t row0, int64_t n);

// A small tensor (norm weight, bias) dequantised to f32 with its exact shape checked.
std::vector<float> load_f32(const Checkpoint& ck, const std::string& name, const std::vector<int64_t>& shape);

// Bytes that a Weight occupies (payload + scales).
inline uint64_t weight_bytes(const Weight& w) { return w.data_bytes() + w.scale_bytes(); }

}  // namespace sluice
