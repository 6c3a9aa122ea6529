// Reference decoders for ggml blocks (ggml-common.h / ggml-quants.c semantics, specs-digest §3.3-3.4), written
// from the format description with ggml's evaluation order (d*sc first, then times q) so results are bit-exact.
// MXFP4_GGML differs from ggml in one place: an E8M0 scale of 0xFF gives NaN here (ggml ignores it).
#include <cstring>

#include "core/dtype.h"
#include "ops/reference/dequantize_detail.h"

namespace sluice::ops::ref {

namespace {

float load_f16(const uint8_t* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return f16_to_f32(v);
}

// 6-bit scale and min of sub-block j from Q4_K's 12 packed bytes.
void q4_k_scale_min(int j, const uint8_t* s, int& sc, int& m) {
    if (j < 4) {
        sc = s[j] & 63;
        m = s[j + 4] & 63;
    } else {
        sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

}  // namespace

void dequantize_q8_0_block(const uint8_t* b, float* out) {
    const float d = load_f16(b);
    for (int i = 0; i < 32; ++i) out[i] = d * float(int8_t(b[2 + i]));
}

void dequantize_q4_k_block(const uint8_t* b, float* out) {
    const float d = load_f16(b), dmin = load_f16(b + 2);
    const uint8_t* scales = b + 4;
    const uint8_t* qs = b + 16;
    for (int c = 0; c < 4; ++c) {
        int sc0, m0, sc1, m1;
        q4_k_scale_min(2 * c, scales, sc0, m0);
        q4_k_scale_min(2 * c + 1, scales, sc1, m1);
        const float d0 = d * float(sc0), min0 = dmin * float(m0);
        const float d1 = d * float(sc1), min1 = dmin * float(m1);
        const uint8_t* q = qs + 32 * c;
        for (int l = 0; l < 32; ++l) out[64 * c + l] = d0 * float(q[l] & 0xF) - min0;
        for (int l = 0; l < 32; ++l) out[64 * c + 32 + l] = d1 * float(q[l] >> 4) - min1;
    }
}

void dequantize_q6_k_block(const uint8_t* b, float* out) {
    const float d = load_f16(b + 208);
    for (int half = 0; half < 2; ++half) {
        const uint8_t* ql = b + 64 * half;
        const uint8_t* qh = b + 128 + 32 * half;
        const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * half);
        float* y = out + 128 * half;
        for (int l = 0; l < 32; ++l) {
            const int is = l / 16;
            const int q1 = int((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            const int q2 = int((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const int q3 = int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * float(sc[is]) * float(q1);
            y[l + 32] = d * float(sc[is + 2]) * float(q2);
            y[l + 64] = d * float(sc[is + 4]) * float(q3);
            y[l + 96] = d * float(sc[is + 6]) * float(q4);
        }
    }
}

void dequantize_mxfp4_ggml_block(const uint8_t* b, float* out) {
    const float scale = e8m0_value(b[0]);
    for (int j = 0; j < 16; ++j) {
        out[j] = kE2M1Values[b[1 + j] & 0xF] * scale;
        out[j + 16] = kE2M1Values[b[1 + j] >> 4] * scale;
    }
}

}  // namespace sluice::ops::ref
