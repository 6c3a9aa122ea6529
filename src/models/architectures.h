// One factory per architecture file; models/registry.cpp maps config.json names onto them.
#pragma once

#include <memory>
#include <string>

#include "formats/hf_config.h"
#include "models/model.h"

namespace sluice {

// The activation scratch of a forward pass of `rows` rows, from config.json alone (what Model::activation_bytes
// gives once loaded; look_ahead: experts stream, so the next layer's router runs during a layer's reads).
uint64_t deepseek_v3_activation_bytes(const JsonObject& cfg, int64_t rows, bool look_ahead);
uint64_t gpt_oss_activation_bytes(const JsonObject& cfg, int64_t rows, bool look_ahead);
uint64_t kimi_k3_activation_bytes(const JsonObject& cfg, int64_t rows, bool look_ahead);
uint64_t kimi_linear_activation_bytes(const JsonObject& cfg, int64_t rows, bool look_ahead);
uint64_t mixtral_activation_bytes(const JsonObject& cfg, int64_t rows, bool look_ahead);
uint64_t qwen3_moe_activation_bytes(const JsonObject& cfg, int64_t rows, bool look_ahead);

std::unique_ptr<Model> make_deepseek_v3(const std::string& dir, const JsonObject& cfg, const LoadOptions& opt);
std::unique_ptr<Model> make_gpt_oss(const std::string& dir, const JsonObject& cfg, const LoadOptions& opt);
std::unique_ptr<Model> make_kimi_k3(const std::string& dir, const JsonObject& cfg, const LoadOptions& opt);
std::unique_ptr<Model> make_kimi_linear(const std::string& dir, const JsonObject& cfg, const LoadOptions& opt);
std::unique_ptr<Model> make_mixtral(const std::string& dir, const JsonObject& cfg, const LoadOptions& opt);
std::unique_ptr<Model> make_qwen3_moe(const std::string& dir, const JsonObject& cfg, const LoadOptions& opt);

}  // namespace sluice
