// Portable CPU path (any architecture): the reference dequantiser feeds the shared blocking loop, and the dot
// products use fixed 16-lane partial sums that compilers vectorise without -ffast-math.
#include <cmath>

#include "ops/cpu/kernels.h"
#include "ops/cpu/matmul_driver.h"
#include "ops/reference/dequantize_detail.h"

namespace sluice::ops::cpu::portable {

namespace {

// One lane's step, acc + w * x. On AArch64, where every CPU has fused multiply-add, it is one fused multiply-add
// spelled out (std::fma), so no compiler setting changes the bits and the NEON path's fmla gives the same ones
// (arm/neon_matmul.cpp). Elsewhere a rounded product, then a rounded sum (x86-64's baseline has no FMA).
inline float madd(float acc, float w, float x) {
#if defined(__aarch64__)
    return std::fma(w, x, acc);
#else
    return acc + w * x;
#endif
}

struct Kernel {
    static constexpr int kMr = 4;
    static constexpr int kNr = 2;

    static void decode(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out) {
        ref::dequantize_range(w, r, c0, k, out);
    }

    template <int MR, int NR>
    static void tile(const float* const* wr, const float* x, int64_t ldx, int64_t k, float* out) {
        constexpr int L = 16;
        float acc[MR][NR][L] = {};
        int64_t c = 0;
        for (; c + L <= k; c += L)
            for (int j = 0; j < MR; ++j)
                for (int i = 0; i < NR; ++i)
                    for (int l = 0; l < L; ++l) acc[j][i][l] = madd(acc[j][i][l], wr[j][c + l], x[i * ldx + c + l]);
        for (int j = 0; j < MR; ++j)
            for (int i = 0; i < NR; ++i) {
                for (int64_t t = c; t < k; ++t) acc[j][i][t - c] = madd(acc[j][i][t - c], wr[j][t], x[i * ldx + t]);
                float* a = acc[j][i];
                for (int width = L / 2; width >= 1; width /= 2)
                    for (int l = 0; l < width; ++l) a[l] += a[l + width];
                out[i * MR + j] = a[0];
            }
    }
};

}  // namespace

void matmul_rows(const Weight& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1, float* scratch) {
    matmul_rows_blocked<Kernel>(w, x, n, y, r0, r1, scratch);
}

void dequantize_range(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out) {
    ref::dequantize_range(w, r, c0, k, out);
}

}  // namespace sluice::ops::cpu::portable
