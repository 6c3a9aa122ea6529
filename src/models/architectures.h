// One factory per architecture file; models/registry.cpp maps config.json names onto them.
#pragma once

#include <memory>
#include <string>

#include "formats/hf_config.h"
#include "models/model.h"

namespace sluice {

std::unique_ptr<Model> make_deepseek_v3(const std::string& dir, const JsonObject& cfg, const LoadOptions& opt);
std::unique_ptr<Model> make_gpt_oss(const std::string& dir, const JsonObject& cfg, const LoadOptions& opt);
std::unique_ptr<Model> make_kimi_k3(const std::string& dir, const JsonObject& cfg, const LoadOptions& opt);
std::unique_ptr<Model> make_kimi_linear(const std::string& dir, const JsonObject& cfg, const LoadOptions& opt);
std::unique_ptr<Model> make_mixtral(const std::string& dir, const JsonObject& cfg, const LoadOptions& opt);
std::unique_ptr<Model> make_qwen3_moe(const std::string& dir, const JsonObject& cfg, const LoadOptions& opt);

}  // namespace sluice
