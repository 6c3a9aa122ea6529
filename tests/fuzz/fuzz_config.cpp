// Fuzzes config.json parsing into the DeepSeek-V3 config (JSON, typed getters, RoPE parameters, validation).
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "formats/hf_config.h"
#include "models/blocks/rope.h"
#include "models/deepseek_v3_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        auto j = sluice::JsonObject::parse(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
        auto c = sluice::DeepseekV3Config::from_json(j);
        (void)c.softmax_scale();
        if (c.qk_rope_head_dim <= 4096) sluice::Rope r(c.rope, c.qk_rope_head_dim);
    } catch (const sluice::Error&) {
    }
    return 0;
}
