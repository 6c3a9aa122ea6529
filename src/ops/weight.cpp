#include "ops/weight.h"

#include "core/error.h"

namespace sluice {

std::string_view weight_format_name(WeightFormat f) {
    switch (f) {
        case WeightFormat::F32: return "f32";
        case WeightFormat::F16: return "f16";
        case WeightFormat::BF16: return "bf16";
        case WeightFormat::FP8_E4M3_B128: return "fp8-e4m3-b128";
        case WeightFormat::MXFP4: return "mxfp4";
        case WeightFormat::INT4_G32: return "int4-g32";
        case WeightFormat::Q8_0: return "q8_0";
        case WeightFormat::Q4_K: return "q4_k";
        case WeightFormat::Q6_K: return "q6_k";
        case WeightFormat::MXFP4_GGML: return "mxfp4-ggml";
    }
    return "?";
}

uint64_t Weight::data_bytes() const {
    const uint64_t n = uint64_t(rows) * uint64_t(cols);
    switch (format) {
        case WeightFormat::F32: return n * 4;
        case WeightFormat::F16:
        case WeightFormat::BF16: return n * 2;
        case WeightFormat::FP8_E4M3_B128: return n;
        case WeightFormat::MXFP4:
        case WeightFormat::INT4_G32: return n / 2;
        case WeightFormat::Q8_0: return n / 32 * 34;
        case WeightFormat::Q4_K: return n / 256 * 144;
        case WeightFormat::Q6_K: return n / 256 * 210;
        case WeightFormat::MXFP4_GGML: return n / 32 * 17;
    }
    return 0;
}

uint64_t Weight::scale_bytes() const {
    switch (format) {
        case WeightFormat::FP8_E4M3_B128:
            return uint64_t((rows + 127) / 128) * uint64_t((cols + 127) / 128) * 4;
        case WeightFormat::MXFP4: return uint64_t(rows) * uint64_t(cols / 32);
        case WeightFormat::INT4_G32: return uint64_t(rows) * uint64_t(cols / 32) * 2;
        default: return 0;
    }
}

}  // namespace sluice
