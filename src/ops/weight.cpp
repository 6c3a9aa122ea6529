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

int64_t weight_block_cols(WeightFormat f) {
    switch (f) {
        case WeightFormat::F32:
        case WeightFormat::F16:
        case WeightFormat::BF16: return 1;
        case WeightFormat::FP8_E4M3_B128: return 128;
        case WeightFormat::MXFP4:
        case WeightFormat::INT4_G32:
        case WeightFormat::Q8_0:
        case WeightFormat::MXFP4_GGML: return 32;
        case WeightFormat::Q4_K:
        case WeightFormat::Q6_K: return 256;
    }
    return 1;
}

void Weight::check() const {
    const auto name = weight_format_name(format);
    SLUICE_CHECK(rows >= 0 && cols >= 0, "weight (", name, "): negative shape [", rows, ", ", cols, "]");
    if (rows == 0 || cols == 0) return;
    SLUICE_CHECK(data != nullptr, "weight (", name, ") [", rows, ", ", cols, "]: no data");
    // FP8's 128-column scale tiles may be ragged; every other block format needs whole blocks per row.
    const int64_t block = format == WeightFormat::FP8_E4M3_B128 ? 1 : weight_block_cols(format);
    SLUICE_CHECK(cols % block == 0, "weight (", name, "): cols ", cols, " is not a multiple of ", block);
    const bool needs_scales = format == WeightFormat::FP8_E4M3_B128 || format == WeightFormat::MXFP4 ||
                              format == WeightFormat::INT4_G32;
    SLUICE_CHECK(!needs_scales || scales != nullptr, "weight (", name, ") [", rows, ", ", cols, "]: no scales");
}

}  // namespace sluice
