#include "models/synth_random.h"

#include <array>
#include <cmath>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace sluice::synth {

uint64_t tensor_key(uint64_t seed, std::string_view name) {
    uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
    for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
    return mix64(mix64(seed) ^ h);
}

namespace {

// Maps 16 random bits to [-1, 1).
inline float unit16(uint64_t bits) { return (float(bits & 0xffff) + 0.5f) * (2.0f / 65536.0f) - 1.0f; }
// Maps 32 random bits to [-1, 1) with 24-bit resolution.
inline float unit32(uint64_t bits) { return (float((bits >> 8) & 0xffffff) + 0.5f) * (2.0f / 16777216.0f) - 1.0f; }

}  // namespace

TensorFill uniform_fill(DType dtype, uint64_t key, float center, float half_width) {
    switch (dtype) {
    case DType::BF16:
    case DType::F16: {
        const bool bf = dtype == DType::BF16;
        return [=](uint64_t off, uint8_t* dst, uint64_t n) {
            const uint64_t i0 = off / 2, count = n / 2;
            uint64_t word = 0;
            for (uint64_t k = 0; k < count; ++k) {
                const uint64_t i = i0 + k;
                if (k == 0 || i % 4 == 0) word = random_word(key, i / 4);
                const float v = center + half_width * unit16(word >> (16 * (i % 4)));
                const uint16_t h = bf ? f32_to_bf16(v) : f32_to_f16(v);
                std::memcpy(dst + 2 * k, &h, 2);
            }
        };
    }
    case DType::F32:
        return [=](uint64_t off, uint8_t* dst, uint64_t n) {
            const uint64_t i0 = off / 4, count = n / 4;
            uint64_t word = 0;
            for (uint64_t k = 0; k < count; ++k) {
                const uint64_t i = i0 + k;
                if (k == 0 || i % 2 == 0) word = random_word(key, i / 2);
                const float v = center + half_width * unit32(word >> (32 * (i % 2)));
                std::memcpy(dst + 4 * k, &v, 4);
            }
        };
    default:
        fail("uniform_fill: unsupported dtype ", dtype_name(dtype));
    }
}

uint8_t f32_to_fp8_e4m3(float x) {
    const uint8_t sign = std::signbit(x) ? 0x80 : 0;
    const float a = std::fabs(x);
    if (!(a < 448.0f)) return sign | 0x7e;
    // Search the 127 finite non-negative codes (monotonic in code order) for the nearest.
    int lo = 0, hi = 0x7e;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (fp8_e4m3_to_f32(uint8_t(mid)) <= a) lo = mid; else hi = mid;
    }
    const float dl = a - fp8_e4m3_to_f32(uint8_t(lo)), dh = fp8_e4m3_to_f32(uint8_t(hi)) - a;
    const int code = dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi);
    return sign | uint8_t(code);
}

TensorFill fp8_e4m3_fill(uint64_t key) {
    static const std::shared_ptr<const std::array<uint8_t, 65536>> table = [] {
        auto t = std::make_shared<std::array<uint8_t, 65536>>();
        for (uint32_t u = 0; u < 65536; ++u) (*t)[u] = f32_to_fp8_e4m3(448.0f * unit16(u));
        return t;
    }();
    return [key, tab = table](uint64_t off, uint8_t* dst, uint64_t n) {
        uint64_t word = 0;
        for (uint64_t k = 0; k < n; ++k) {
            const uint64_t i = off + k;
            if (k == 0 || i % 4 == 0) word = random_word(key, i / 4);
            dst[k] = (*tab)[(word >> (16 * (i % 4))) & 0xffff];
        }
    };
}

TensorFill random_bits_fill(uint64_t key) {
    return [key](uint64_t off, uint8_t* dst, uint64_t n) {
        uint64_t k = 0;
        // Leading bytes up to a word boundary, whole words, trailing bytes.
        for (; k < n && (off + k) % 8 != 0; ++k) dst[k] = uint8_t(random_word(key, (off + k) / 8) >> (8 * ((off + k) % 8)));
        for (; k + 8 <= n; k += 8) {
            const uint64_t w = random_word(key, (off + k) / 8);
            std::memcpy(dst + k, &w, 8);
        }
        for (; k < n; ++k) dst[k] = uint8_t(random_word(key, (off + k) / 8) >> (8 * ((off + k) % 8)));
    };
}

TensorFill e8m0_fill(uint64_t key, int exponent) {
    SLUICE_CHECK(exponent > -126 && exponent < 127, "e8m0_fill: exponent ", exponent, " out of range");
    return [key, exponent](uint64_t off, uint8_t* dst, uint64_t n) {
        for (uint64_t k = 0; k < n; ++k) {
            const uint64_t i = off + k;
            const int e = exponent - int((random_word(key, i / 64) >> (i % 64)) & 1);
            dst[k] = uint8_t(127 + e);
        }
    };
}

TensorFill int32_values_fill(std::vector<int32_t> values) {
    return [v = std::move(values)](uint64_t off, uint8_t* dst, uint64_t n) {
        SLUICE_ASSERT(off + n <= v.size() * 4, "int32_values_fill: range past the values");
        std::memcpy(dst, reinterpret_cast<const uint8_t*>(v.data()) + off, n);
    };
}

}  // namespace sluice::synth
