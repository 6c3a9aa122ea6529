// Reference quantisers (rules in quantize.h). Element rounding searches the sorted table of representable
// magnitudes, which is slow but obviously right: nearest value, ties to the even code, saturate at the top.
#include "ops/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "ops/reference/dequantize_detail.h"

namespace sluice {

namespace {

// Index of the nearest entry of ascending `mags` to a (>= 0); ties go to the even index.
int nearest_index(const float* mags, int count, float a) {
    if (a >= mags[count - 1]) return count - 1;
    const float* hi = std::upper_bound(mags, mags + count, a);
    const int i = int(hi - mags);  // mags[i-1] <= a < mags[i]
    const double dl = double(a) - mags[i - 1], dh = double(mags[i]) - a;
    if (dl < dh) return i - 1;
    if (dh < dl) return i;
    return (i - 1) % 2 == 0 ? i - 1 : i;
}

struct Fp8Table {
    float mags[127];  // codes 0..126 (0x7F is NaN)
    Fp8Table() {
        for (int c = 0; c < 127; ++c) mags[c] = fp8_e4m3_to_f32(uint8_t(c));
    }
};

void put_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

float amax_of(const float* x, int64_t n) {
    float a = 0;
    for (int64_t i = 0; i < n; ++i) a = std::max(a, std::fabs(x[i]));
    return a;
}

void quantize_fp8(const float* w, QuantizedWeight& q) {
    const int64_t tr = (q.rows + 127) / 128, tc = (q.cols + 127) / 128;
    q.data.assign(size_t(q.rows * q.cols), 0);
    q.scales.assign(size_t(tr * tc * 4), 0);
    for (int64_t bi = 0; bi < tr; ++bi)
        for (int64_t bj = 0; bj < tc; ++bj) {
            float amax = 0;
            for (int64_t r = bi * 128; r < std::min(q.rows, bi * 128 + 128); ++r)
                amax = std::max(amax, amax_of(w + r * q.cols + bj * 128, std::min<int64_t>(128, q.cols - bj * 128)));
            const float scale = amax > 0 ? amax / 448.0f : 1.0f;
            std::memcpy(q.scales.data() + (bi * tc + bj) * 4, &scale, 4);
            for (int64_t r = bi * 128; r < std::min(q.rows, bi * 128 + 128); ++r)
                for (int64_t c = bj * 128; c < std::min(q.cols, bj * 128 + 128); ++c)
                    q.data[size_t(r * q.cols + c)] = f32_to_fp8_e4m3(w[r * q.cols + c] / scale);
        }
}

// One 32-element MX block: returns the scale byte, writes 32 codes.
uint8_t mx_block(const float* x, uint8_t* codes) {
    bool nan = false;
    for (int i = 0; i < 32; ++i) nan |= std::isnan(x[i]);
    const uint8_t e = nan ? 0xFF : mxfp4_shared_exponent(amax_of(x, 32));
    const float scale = nan ? 1.0f : ops::ref::e8m0_value(e);
    for (int i = 0; i < 32; ++i) codes[i] = nan ? 0 : f32_to_e2m1(x[i] / scale);
    return e;
}

void quantize_mxfp4(const float* w, QuantizedWeight& q, bool ggml) {
    const int64_t nb = q.cols / 32;
    q.data.assign(size_t(q.rows * nb * (ggml ? 17 : 16)), 0);
    if (!ggml) q.scales.assign(size_t(q.rows * nb), 0);
    uint8_t codes[32];
    for (int64_t r = 0; r < q.rows; ++r)
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t e = mx_block(w + r * q.cols + b * 32, codes);
            if (ggml) {
                uint8_t* blk = q.data.data() + (r * nb + b) * 17;
                blk[0] = e;
                for (int j = 0; j < 16; ++j) blk[1 + j] = uint8_t(codes[j] | (codes[j + 16] << 4));
            } else {
                q.scales[size_t(r * nb + b)] = e;
                uint8_t* blk = q.data.data() + (r * nb + b) * 16;
                for (int j = 0; j < 16; ++j) blk[j] = uint8_t(codes[2 * j] | (codes[2 * j + 1] << 4));
            }
        }
}

void quantize_int4(const float* w, QuantizedWeight& q) {
    const int64_t nb = q.cols / 32;
    q.data.assign(size_t(q.rows * q.cols / 2), 0);
    q.scales.assign(size_t(q.rows * nb * 2), 0);
    for (int64_t r = 0; r < q.rows; ++r)
        for (int64_t b = 0; b < nb; ++b) {
            const float* x = w + r * q.cols + b * 32;
            const uint16_t sb = f32_to_bf16(amax_of(x, 32) / 7.0f);
            put_u16(q.scales.data() + (r * nb + b) * 2, sb);
            const float scale = bf16_to_f32(sb);
            for (int i = 0; i < 32; ++i) {
                const int v = scale > 0 ? int(std::clamp(std::nearbyint(x[i] / scale), -8.0f, 7.0f)) : 0;
                const int64_t c = b * 32 + i;
                uint8_t& byte = q.data[size_t(r * q.cols / 2 + c / 2)];  // word c/8, nibble c%8 == byte c/2
                byte = uint8_t(byte | (uint8_t(v + 8) << (4 * (c % 2))));
            }
        }
}

void quantize_q8_0(const float* w, QuantizedWeight& q) {
    const int64_t nb = q.cols / 32;
    q.data.assign(size_t(q.rows * nb * 34), 0);
    for (int64_t r = 0; r < q.rows; ++r)
        for (int64_t b = 0; b < nb; ++b) {
            const float* x = w + r * q.cols + b * 32;
            const float d = amax_of(x, 32) / 127.0f;
            const float id = d > 0 ? 1.0f / d : 0.0f;
            uint8_t* blk = q.data.data() + (r * nb + b) * 34;
            put_u16(blk, f32_to_f16(d));
            for (int i = 0; i < 32; ++i) blk[2 + i] = uint8_t(int8_t(std::roundf(x[i] * id)));
        }
}

void quantize_q4_k_block(const float* x, uint8_t* blk) {
    float step[8], mn[8];
    for (int j = 0; j < 8; ++j) {
        float lo = 0, hi = 0;
        for (int i = 0; i < 32; ++i) lo = std::min(lo, x[32 * j + i]), hi = std::max(hi, x[32 * j + i]);
        step[j] = (hi - lo) / 15.0f;
        mn[j] = -lo;
    }
    const float d = *std::max_element(step, step + 8) / 63.0f, dmin = *std::max_element(mn, mn + 8) / 63.0f;
    put_u16(blk, f32_to_f16(d));
    put_u16(blk + 2, f32_to_f16(dmin));
    const float dq = f16_to_f32(uint16_t(blk[0] | blk[1] << 8)), dminq = f16_to_f32(uint16_t(blk[2] | blk[3] << 8));
    int sc[8], m[8];
    for (int j = 0; j < 8; ++j) {
        sc[j] = dq > 0 ? std::clamp(int(std::lround(step[j] / dq)), 0, 63) : 0;
        m[j] = dminq > 0 ? std::clamp(int(std::lround(mn[j] / dminq)), 0, 63) : 0;
    }
    uint8_t* s = blk + 4;
    for (int j = 0; j < 4; ++j) {
        s[j] = uint8_t((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = uint8_t((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        s[j + 8] = uint8_t((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
    }
    uint8_t* qs = blk + 16;
    for (int c = 0; c < 4; ++c)
        for (int l = 0; l < 32; ++l) {
            int q2[2];
            for (int h = 0; h < 2; ++h) {
                const int j = 2 * c + h;
                const float st = dq * float(sc[j]), off = dminq * float(m[j]);
                q2[h] = st > 0 ? std::clamp(int(std::lround((x[32 * j + l] + off) / st)), 0, 15) : 0;
            }
            qs[32 * c + l] = uint8_t(q2[0] | (q2[1] << 4));
        }
}

void quantize_q6_k_block(const float* x, uint8_t* blk) {
    float s[16];
    for (int j = 0; j < 16; ++j) s[j] = amax_of(x + 16 * j, 16) / 31.5f;
    const float d = *std::max_element(s, s + 16) / 127.0f;
    put_u16(blk + 208, f32_to_f16(d));
    const float dq = f16_to_f32(uint16_t(blk[208] | blk[209] << 8));
    int8_t* sc = reinterpret_cast<int8_t*>(blk + 192);
    int q[256];
    for (int j = 0; j < 16; ++j) {
        sc[j] = int8_t(dq > 0 ? std::clamp(int(std::lround(s[j] / dq)), 0, 127) : 0);
        const float st = dq * float(sc[j]);
        for (int i = 0; i < 16; ++i)
            q[16 * j + i] = st > 0 ? std::clamp(int(std::lround(x[16 * j + i] / st)), -32, 31) + 32 : 32;
    }
    std::memset(blk, 0, 192);
    for (int half = 0; half < 2; ++half) {
        uint8_t* ql = blk + 64 * half;
        uint8_t* qh = blk + 128 + 32 * half;
        const int* qq = q + 128 * half;
        for (int l = 0; l < 32; ++l) {
            ql[l] = uint8_t((qq[l] & 0xF) | ((qq[l + 64] & 0xF) << 4));
            ql[l + 32] = uint8_t((qq[l + 32] & 0xF) | ((qq[l + 96] & 0xF) << 4));
            qh[l] = uint8_t((qq[l] >> 4) | ((qq[l + 32] >> 4) << 2) | ((qq[l + 64] >> 4) << 4) | ((qq[l + 96] >> 4) << 6));
        }
    }
}

template <int64_t Bytes>
void quantize_k(const float* w, QuantizedWeight& q, void (*fn)(const float*, uint8_t*)) {
    const int64_t nb = q.cols / 256;
    q.data.assign(size_t(q.rows * nb * Bytes), 0);
    for (int64_t r = 0; r < q.rows; ++r)
        for (int64_t b = 0; b < nb; ++b) fn(w + r * q.cols + b * 256, q.data.data() + (r * nb + b) * Bytes);
}

}  // namespace

uint8_t f32_to_e2m1(float v) {
    static constexpr float mags[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    if (std::isnan(v)) return 0;
    const uint8_t sign = std::signbit(v) ? 8 : 0;
    return uint8_t(sign | nearest_index(mags, 8, std::fabs(v)));
}

uint8_t f32_to_fp8_e4m3(float v) {
    static const Fp8Table table;
    if (std::isnan(v)) return 0x7F;
    const uint8_t sign = std::signbit(v) ? 0x80 : 0;
    return uint8_t(sign | nearest_index(table.mags, 127, std::fabs(v)));
}

uint8_t mxfp4_shared_exponent(float amax) {
    if (!(amax > 0) || std::isinf(amax)) return amax > 0 ? 254 : 0;
    const int e = std::ilogb(amax) - 2;  // floor(log2(amax)) - emax(E2M1)
    return uint8_t(std::clamp(e, -127, 127) + 127);
}

QuantizedWeight quantize(const float* w, int64_t rows, int64_t cols, WeightFormat format) {
    QuantizedWeight q;
    q.format = format;
    q.rows = rows;
    q.cols = cols;
    const int64_t block = format == WeightFormat::FP8_E4M3_B128 ? 1 : weight_block_cols(format);
    SLUICE_CHECK(rows >= 0 && cols >= 0 && cols % block == 0, "quantize to ", weight_format_name(format), ": cols ",
                 cols, " is not a multiple of ", block);
    const int64_t n = rows * cols;
    switch (format) {
        case WeightFormat::F32:
            q.data.assign(size_t(n * 4), 0);
            if (n) std::memcpy(q.data.data(), w, size_t(n) * 4);
            break;
        case WeightFormat::F16:
        case WeightFormat::BF16:
            q.data.assign(size_t(n * 2), 0);
            for (int64_t i = 0; i < n; ++i)
                put_u16(q.data.data() + 2 * i, format == WeightFormat::F16 ? f32_to_f16(w[i]) : f32_to_bf16(w[i]));
            break;
        case WeightFormat::FP8_E4M3_B128: quantize_fp8(w, q); break;
        case WeightFormat::MXFP4: quantize_mxfp4(w, q, false); break;
        case WeightFormat::MXFP4_GGML: quantize_mxfp4(w, q, true); break;
        case WeightFormat::INT4_G32: quantize_int4(w, q); break;
        case WeightFormat::Q8_0: quantize_q8_0(w, q); break;
        case WeightFormat::Q4_K: quantize_k<ops::ref::kQ4_KBlockBytes>(w, q, quantize_q4_k_block); break;
        case WeightFormat::Q6_K: quantize_k<ops::ref::kQ6_KBlockBytes>(w, q, quantize_q6_k_block); break;
    }
    return q;
}

}  // namespace sluice
