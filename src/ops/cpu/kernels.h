// The per-ISA kernel entry points behind ops::matmul / ops::dequantize_row (chosen in dispatch.cpp). Each path
// lives in its own translation unit compiled with its own ISA flags; they share no inline code (an inline
// function compiled with -mavx512f could be picked by the linker for every caller), so scratch memory comes from
// the caller instead of a std::vector inside the kernel file.
#pragma once

#include <cstdint>

#include "ops/weight.h"

namespace sluice::ops::cpu {

// Kernels decode blocks of whole weight rows into f32 scratch (each row one sequential read), then multiply the
// block with every input row, kChunkCols columns at a time so the x chunk [n, kChunkCols] stays in L2. The
// chunking is fixed, so an output does not depend on n, on the row block, or on the thread split. (The AMX kernel
// tiles its own way, with the same guarantee: see x86/amx_matmul.cpp.)
inline constexpr int64_t kChunkCols = 512;        // multiple of every block size (32, 128, 256)
inline constexpr int64_t kRowBlock = 16;          // most rows decoded at once (threads split in these units)
inline constexpr int64_t kScratchBudgetFloats = 131072;  // 512 KiB: the decoded block stays in L2

// Rows decoded at once for a given width: a multiple of 4 in [4, kRowBlock]. (static: ISA files share no
// out-of-line code.)
static inline int64_t matmul_block_rows(int64_t cols) {
    int64_t r = cols > 0 ? kScratchBudgetFloats / cols / 4 * 4 : kRowBlock;
    return r < 4 ? 4 : r > kRowBlock ? kRowBlock : r;
}
static inline int64_t matmul_scratch_floats(int64_t cols) { return matmul_block_rows(cols) * cols; }

// The ops::matmul call that the calling thread's matmul_rows calls belong to, set by dispatch.cpp around each
// row range (0 outside one). One call's x never changes, so a kernel that packs x (AMX) packs it once per call
// and thread however many ranges the thread takes.
extern thread_local uint64_t t_matmul_call;

// y[:, r0:r1] of y[n, w.rows] = x[n, w.cols] . W^T. scratch: matmul_scratch_floats(w.cols) floats.
using MatmulRowsFn = void (*)(const Weight& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1,
                              float* scratch);
// Columns [c0, c0 + k) of row r (block aligned like ref::dequantize_range) into out.
using DequantRangeFn = void (*)(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out);

namespace portable {
void matmul_rows(const Weight& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1, float* scratch);
void dequantize_range(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out);
}  // namespace portable

namespace avx2 {  // needs avx2 + fma + f16c
// n <= 2 without scratch (avx2_matvec.cpp); false when the format or width is not covered there.
bool matmul_rows_fused(const Weight& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1);
void matmul_rows(const Weight& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1, float* scratch);
void dequantize_range(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out);
double fma_probe(int64_t iterations);  // f32 FMAs on one core; returns the flops done
// Attention's loops with AVX2 (avx2_attention.cpp), bit for bit those of ops/cpu/simd.h, as avx512's below.
void attention_dots(const float* q, const float* const* keys, int64_t n_keys, int64_t n, float scale, float* out);
void attention_axpys(const float* p, const float* const* values, int64_t n_values, float* acc, int64_t n);
}  // namespace avx2

namespace avx512 {  // needs avx512f/bw/vl/dq + fma + f16c
// n <= 4 without scratch (avx512_matvec.cpp); false when the format or width is not covered there.
bool matmul_rows_fused(const Weight& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1);
// The same for MXFP4/INT4_G32 with VBMI (avx512vbmi_matvec.cpp; call only when cpuid reports avx512_vbmi).
bool matmul_rows_fused_vbmi(const Weight& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1);
void matmul_rows(const Weight& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1, float* scratch);
void dequantize_range(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out);
double fma_probe(int64_t iterations);  // f32 FMAs on one core; returns the flops done
// Attention's loops (avx512_attention.cpp), bit for bit those of ops/cpu/simd.h: out[t] = dot_f32(q, keys[t], n) *
// scale, and acc += p[t] * values[t] for t in order.
void attention_dots(const float* q, const float* const* keys, int64_t n_keys, int64_t n, float scale, float* out);
void attention_axpys(const float* p, const float* const* values, int64_t n_values, float* acc, int64_t n);
// The same for four pairs at once (q[m], out[m]; p[m], acc[m]), each pair's bits those of the calls above.
void attention_dots4(const float* const* q, const float* const* keys, int64_t n_keys, int64_t n, float scale,
                     float* const* out);
void attention_axpys4(const float* const* p, const float* const* values, int64_t n_values, float* const* acc,
                      int64_t n);
}  // namespace avx512

namespace amx {  // needs the avx512 set + avx512-bf16 + amx-tile/amx-bf16
// True once Linux granted tile state to the process (asked on the first call; cpu_has_amx gates the request).
bool enable(bool cpu_has_amx);
bool covers(const Weight& w);  // BF16 (cols % 32 == 0), MXFP4, INT4_G32; others go to avx512
void matmul_rows(const Weight& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1, float* scratch);
}  // namespace amx

namespace neon {  // AArch64 Advanced SIMD (arm/neon_matmul.cpp): every weight format, the portable path's bits
void matmul_rows(const Weight& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1, float* scratch);
void dequantize_range(const Weight& w, int64_t r, int64_t c0, int64_t k, float* out);
double fma_probe(int64_t iterations);  // f32 FMAs on one core; returns the flops done
}  // namespace neon

}  // namespace sluice::ops::cpu
