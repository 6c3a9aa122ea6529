#include "core/dtype.h"

#include <cmath>
#include <limits>

namespace sluice {

namespace {
struct DTypeInfo {
    DType type;
    std::string_view name;
    size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::F64, "F64", 8},         {DType::F32, "F32", 4},         {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2},       {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
    {DType::F8_E8M0, "F8_E8M0", 1}, {DType::I64, "I64", 8},         {DType::I32, "I32", 4},
    {DType::I16, "I16", 2},         {DType::I8, "I8", 1},           {DType::U64, "U64", 8},
    {DType::U32, "U32", 4},         {DType::U16, "U16", 2},         {DType::U8, "U8", 1},
    {DType::BOOL, "BOOL", 1},
};
}  // namespace

std::string_view dtype_name(DType t) {
    for (const auto& d : kDTypes)
        if (d.type == t) return d.name;
    return "?";
}

std::optional<DType> dtype_from_name(std::string_view name) {
    for (const auto& d : kDTypes)
        if (d.name == name) return d.type;
    return std::nullopt;
}

size_t dtype_size_bytes(DType t) {
    for (const auto& d : kDTypes)
        if (d.type == t) return d.size;
    return 0;
}

float f16_to_f32(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else {  // subnormal: normalise
            int e = -1;
            do {
                mant <<= 1;
                ++e;
            } while ((mant & 0x400) == 0);
            mant &= 0x3ff;
            bits = sign | uint32_t(127 - 15 - e) << 23 | mant << 13;
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | mant << 13;
    } else {
        bits = sign | (exp + 127 - 15) << 23 | mant << 13;
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

uint16_t f32_to_f16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffff;
    if (absx > 0x7f800000) return uint16_t(sign | 0x7e00);  // NaN
    if (absx >= 0x477ff000) return uint16_t(sign | 0x7c00);  // overflow to inf (after rounding)
    if (absx < 0x38800000) {                                 // subnormal or zero in f16
        float a;
        std::memcpy(&a, &absx, 4);
        // scale so that the f16 subnormal unit (2^-24) becomes 1, then round to nearest even
        float scaled = a * 16777216.0f;
        uint32_t m = uint32_t(std::nearbyint(scaled));
        return uint16_t(sign | m);
    }
    uint32_t mant = absx & 0x7fffff;
    uint32_t exp = (absx >> 23) - 127 + 15;
    uint32_t h = exp << 10 | mant >> 13;
    uint32_t rest = mant & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
    return uint16_t(sign | h);
}

float fp8_e4m3_to_f32(uint8_t v) {
    const float sign = (v & 0x80) ? -1.0f : 1.0f;
    const int exp = (v >> 3) & 0xf;
    const int mant = v & 0x7;
    if (exp == 0xf && mant == 0x7) return std::numeric_limits<float>::quiet_NaN();
    if (exp == 0) return sign * std::ldexp(float(mant) / 8.0f, -6);
    return sign * std::ldexp(1.0f + float(mant) / 8.0f, exp - 7);
}

float e8m0_to_f32(uint8_t v) {
    if (v == 0xff) return std::numeric_limits<float>::quiet_NaN();
    return std::ldexp(1.0f, int(v) - 127);
}

}  // namespace sluice
