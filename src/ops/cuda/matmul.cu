// Weight matmul on tensor cores, exact to f32 level (backend.h says why), batch-invariant.
//
// Layout: a warp owns 16 weight rows (the mma's M) and 8 * NT activation rows (N); y = W x^T comes out transposed
// in the accumulators and is stored as y[n][rows]. Along k, each 128-column chunk is split over the quad's four
// threads, thread t owning columns [32t, 32t + 32): it loads its weight and activation values with wide loads and
// feeds them to the mma's k slots in its own order. The pairing is the same for A and B (thread t's k slots always
// hold its own columns), so the products are W[r][c] x[i][c] for every c exactly once; the order in which they are
// summed is fixed by the weight's shape alone.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "ops/cuda/matmul_kernels.cuh"

namespace sluice::cuda::kernels {

namespace {

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
}

__device__ __forceinline__ float bf16_bits_value(uint32_t bits) { return __uint_as_float(bits << 16); }

// Products and differences of bf16 pairs, rounded once (no contraction into an fma); bf16 keeps subnormals.
__device__ __forceinline__ uint32_t mul_bf16x2(uint32_t a, uint32_t b) {
    uint32_t d;
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
__device__ __forceinline__ uint32_t sub_bf16x2(uint32_t a, uint32_t b) {
    uint32_t d;
    asm("sub.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

// The nibble formats pair column j of each group of 8 with column j + 4 in a bf16x2 (nibble_pairs): the two codes
// sit 16 bits apart in the word, so one mask, one multiply and one mask place both. 8 e2m1 codes (element j in bits
// 4j..4j+3) as 4 pairs of bf16 equal to the code's value times 2^-126: sign to bit 15, exponent and mantissa bits to
// 8..6, which for the two subnormal codes (0, 0.5) is a bf16 subnormal with the same 2^-126 factor.
__device__ __forceinline__ void e2m1_x2(uint32_t q, uint32_t& p0, uint32_t& p1, uint32_t& p2, uint32_t& p3) {
    const uint32_t q8 = q >> 8;
    p0 = ((q & 0x000F000Fu) * 0x1040u) & 0x81C081C0u;   // << 6 and << 12
    p1 = ((q & 0x00F000F0u) * 0x0104u) & 0x81C081C0u;   // << 2 and << 8
    p2 = ((q8 & 0x000F000Fu) * 0x1040u) & 0x81C081C0u;
    p3 = ((q8 & 0x00F000F0u) * 0x0104u) & 0x81C081C0u;
}

// 16 codes of a nibble format (q0: columns 0-7, q1: 8-15, element j in bits 4j..4j+3) and their block's scale
// (E8M0 byte, or bf16 bits) as 8 bf16x2 words in nibble_pairs order, the scale applied: exactly the bf16 of code
// value x scale that the reference computes in float and rounds (MXFP4: all exact; INT4: one rounding either way).
// MXFP4: `small` says that every active lane's scale is at most 2^1 (E8M0 <= 128: trained weights have |w| < 12);
// the caller votes once for several blocks (small_scales).
__device__ __forceinline__ bool small_scales(uint32_t e) { return __all_sync(__activemask(), e <= 128u); }

template <int F>
__device__ __forceinline__ void decode_nib16(uint32_t q0, uint32_t q1, uint32_t scale, bool small, uint32_t (&o)[8]) {
    if constexpr (F == int(WeightFormat::MXFP4)) {
        // each code's bits straight into a bf16 (e2m1_x2: value x 2^-126), then one multiply by a power of two
        e2m1_x2(q0, o[0], o[1], o[2], o[3]);
        e2m1_x2(q1, o[4], o[5], o[6], o[7]);
        const uint32_t e = scale;
        if (small) [[likely]] {  // 2^-126 * 2^(e - 1) = the scale 2^(e - 127)
            const uint32_t s2 = e * 0x00800080u + 0x3F003F00u;
#pragma unroll
            for (int k = 0; k < 8; ++k) o[k] = mul_bf16x2(o[k], s2);
        } else {  // a lane's scale is past 2^1 (trained weights: never): 2^(e - 1) is not a bf16, so two steps
            const uint32_t s2 = e == 255u ? 0x7FC07FC0u : e * 0x00800080u;  // 255: NaN
            const uint32_t n2 = 0x7E807E80u;                                    // 2^126
#pragma unroll
            for (int k = 0; k < 8; ++k) o[k] = mul_bf16x2(mul_bf16x2(o[k], n2), s2);
        }
    } else {
        // q + 128 as a bf16 by its mantissa bits, minus 136: q - 8 exactly; times the scale, rounded once
        const uint32_t s2 = scale * 0x00010001u;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const uint32_t v = (k < 4 ? q0 : q1) >> (4 * (k & 3));
            o[k] = mul_bf16x2(sub_bf16x2((v & 0x000F000Fu) | 0x43004300u, 0x43084308u), s2);
        }
    }
}

// 16 weights of row r from column col0 (a multiple of 16) as 8 bf16x2 words, scale applied (FP8's is not: its
// per-tile scale multiplies the chunk's partial sum).
template <int F>
__device__ __forceinline__ void load16(const WDesc& w, int64_t r, int64_t col0, uint32_t (&o)[8]) {
    if constexpr (F == int(WeightFormat::BF16)) {
        const uint4* p = reinterpret_cast<const uint4*>(w.data + (r * w.cols + col0) * 2);
        const uint4 a = __ldg(p), b = __ldg(p + 1);
        o[0] = a.x, o[1] = a.y, o[2] = a.z, o[3] = a.w, o[4] = b.x, o[5] = b.y, o[6] = b.z, o[7] = b.w;
    } else if constexpr (F == int(WeightFormat::MXFP4)) {
        const uint2 q = __ldg(reinterpret_cast<const uint2*>(w.data + r * (w.cols / 2) + col0 / 2));
        const uint32_t e = __ldg(w.scales + r * (w.cols / 32) + col0 / 32);
        decode_nib16<F>(q.x, q.y, e, small_scales(e), o);
    } else if constexpr (F == int(WeightFormat::INT4_G32)) {
        const uint2 q = __ldg(reinterpret_cast<const uint2*>(w.data + r * (w.cols / 2) + col0 / 2));
        decode_nib16<F>(q.x, q.y, __ldg(reinterpret_cast<const uint16_t*>(w.scales) + r * (w.cols / 32) + col0 / 32),
                        false, o);
    } else if constexpr (F == int(WeightFormat::FP8_E4M3_B128)) {
        const uint4 q = __ldg(reinterpret_cast<const uint4*>(w.data + r * w.cols + col0));
        const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const auto pair = static_cast<__nv_fp8x2_storage_t>((words[k / 2] >> (16 * (k & 1))) & 0xFFFFu);
            const __half2 h = __half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3));
            const float2 f = __half22float2(h);
            o[k] = pack_bf16(f.x, f.y);
        }
    }
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// v = hi + mid + lo exactly (finite v; a non-finite v goes in hi alone). The one definition both the split kernel
// and the kernels that split their own rows use, so a row's parts never depend on which did it.
__device__ __forceinline__ void split3(float v, __nv_bfloat16& hi, __nv_bfloat16& mid, __nv_bfloat16& lo) {
    if (!isfinite(v)) {
        hi = __float2bfloat16_rn(v), mid = lo = __float2bfloat16_rn(0.0f);
        return;
    }
    hi = __float2bfloat16_rn(v);
    const float r1 = v - __bfloat162float(hi);
    mid = __float2bfloat16_rn(r1);
    lo = __float2bfloat16_rn(r1 - __bfloat162float(mid));
}

// Where element j of each group of 8 goes in a row of split parts: natural order, or for the nibble formats' pairs
// (j, j + 4) next to each other (0 4 1 5 2 6 3 7), so that one 16-byte load gives the pairs their weights are in.
__device__ __forceinline__ int64_t part_slot(int64_t i, bool nibble) {
    return nibble ? (i & ~int64_t(7)) | ((i & 3) << 1) | ((i >> 2) & 1) : i;
}

__global__ void split_x_kernel(const float* __restrict__ x, int64_t count, __nv_bfloat16* __restrict__ parts,
                               int64_t plane, bool nibble) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t o = part_slot(i, nibble);
        split3(x[i], parts[o], parts[plane + o], parts[2 * plane + o]);
    }
}

__device__ __forceinline__ uint32_t pack_bf16_bits(__nv_bfloat16 lo, __nv_bfloat16 hi) {
    return __byte_perm(__bfloat16_as_ushort(lo), __bfloat16_as_ushort(hi), 0x5410);
}

// 16 activations of row xr from col0 as three sets of 8 bf16x2 words, paired as F's weights are (nibble_pairs):
// from the split parts (laid out for nibble pairs, or in natural order with kRepair), or split here.
template <int F, bool kSelfSplit, bool kRepair>
__device__ __forceinline__ void load_x16(const __nv_bfloat16* __restrict__ xs, const float* __restrict__ x,
                                         int64_t plane, int64_t row_off, uint32_t (&xb)[3][8]) {
    constexpr bool kNib = nibble_pairs(F);
    if constexpr (kSelfSplit) {
        const float4* src = reinterpret_cast<const float4*>(x + row_off);
#pragma unroll
        for (int q = 0; q < 4; q += 2) {
            const float4 u = __ldg(src + q), v = __ldg(src + q + 1);
            const float e[8] = {u.x, u.y, u.z, u.w, v.x, v.y, v.z, v.w};
            __nv_bfloat16 h[8], m[8], l[8];
#pragma unroll
            for (int k = 0; k < 8; ++k) split3(e[k], h[k], m[k], l[k]);
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const int i = kNib ? k : 2 * k, j = kNib ? k + 4 : 2 * k + 1;  // the pair of register 2q + k
                xb[0][2 * q + k] = pack_bf16_bits(h[i], h[j]);
                xb[1][2 * q + k] = pack_bf16_bits(m[i], m[j]);
                xb[2][2 * q + k] = pack_bf16_bits(l[i], l[j]);
            }
        }
    } else {
#pragma unroll
        for (int p = 0; p < 3; ++p) {
            const uint4* src = reinterpret_cast<const uint4*>(xs + p * plane + row_off);
            const uint4 a = __ldg(src), b = __ldg(src + 1);
            xb[p][0] = a.x, xb[p][1] = a.y, xb[p][2] = a.z, xb[p][3] = a.w;
            xb[p][4] = b.x, xb[p][5] = b.y, xb[p][6] = b.z, xb[p][7] = b.w;
            if constexpr (kNib && kRepair) {  // natural order given (a stage mixing formats): pair (j, j + 4) here
#pragma unroll
                for (int g = 0; g < 8; g += 4) {
                    const uint32_t r0 = xb[p][g], r1 = xb[p][g + 1], r2 = xb[p][g + 2], r3 = xb[p][g + 3];
                    xb[p][g] = __byte_perm(r0, r2, 0x5410), xb[p][g + 1] = __byte_perm(r0, r2, 0x7632);
                    xb[p][g + 2] = __byte_perm(r1, r3, 0x5410), xb[p][g + 3] = __byte_perm(r1, r3, 0x7632);
                }
            }
        }
    }
}

// y[n][rows] = W x^T over this block's rows and this split's chunks of k; with several splits, this split's partial
// sums into part[split][n][rows] (reduce_kernel adds them in split order).
// One block's tile: rows from bx, activation rows from by, split bz of k. The parts of activation row i are at
// xs + p * plane + i * cols (kSelfSplit: x + i * cols, split here). With splits > 1 the tile writes its partial sums
// to part + bz * part_stride (laid out as y), which reduce_kernel adds in split order. mma_kernel runs one weight's
// tiles; grouped_mma_kernel the tiles of many (an expert group), each with the bits it would have alone.
// kFull: every weight row of the warp's tile exists and k is whole chunks, so no fragment needs a bounds test or
// zeroing (a warp-uniform choice made by tile_is_full; the same arithmetic either way).
// mma_tile's one-row (MT = NT = 1), full tile for the nibble formats, software-pipelined: a warp's 16 weight rows take
// the next chunk's codes and scales (16 bytes and one scale per row and lane) before the current chunk's decode and
// mmas, and all of the chunk's activation loads go out before its first mma. The same products, the same order and so
// the same bits as mma_tile's loop, which it replaces for these tiles only (the wide ones have no registers to spare).
// Measured in docs/cuda.md ("decode by bit placement"): 5-14% faster than the table decode, so neither the decode's
// instructions nor its loads in flight are what bounds these tiles.
template <int F, bool kSelfSplit, bool kRepair>
__device__ __forceinline__ void mma_row_nibble(const WDesc& w, const __nv_bfloat16* __restrict__ xs,
                                               const float* __restrict__ x, int64_t n, int64_t plane,
                                               float* __restrict__ y, float* __restrict__ part, int64_t part_stride,
                                               int splits, int64_t chunks_per_split, int64_t bx, int64_t by,
                                               int64_t bz) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t R = w.rows, C = w.cols;
    const int64_t ra = (bx * kBlockWarps + warp) * kWarpRows + g, rb = ra + 8;
    const int64_t n0 = by * 8;
    const int64_t n_chunks = C / kChunkCols;
    const int64_t c_begin = bz * chunks_per_split;
    const int64_t c_end = c_begin + chunks_per_split < n_chunks ? c_begin + chunks_per_split : n_chunks;
    constexpr int kScaleBytes = F == int(WeightFormat::MXFP4) ? 1 : 2;
    // lane t's 32 columns of chunk c: 16 code bytes at c * 64 + 16 t of its rows, one scale (block 4c + t)
    const uint8_t* code_a = w.data + ra * (C / 2) + 16 * t;
    const uint8_t* code_b = w.data + rb * (C / 2) + 16 * t;
    const uint8_t* scale_a = w.scales + (ra * (C / 32) + t) * kScaleBytes;
    const uint8_t* scale_b = w.scales + (rb * (C / 32) + t) * kScaleBytes;
    auto scale_at = [](const uint8_t* p) -> uint32_t {
        if constexpr (kScaleBytes == 1) return __ldg(p);
        else return __ldg(reinterpret_cast<const uint16_t*>(p));
    };
    const int64_t xr = n0 + g < n ? n0 + g : n - 1;  // past the last row: read the last (its column is not stored)
    const int64_t x_row = xr * C + 32 * t;

    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    // codes and scales one chunk ahead of the chunk decoded (two ahead, loads that skip L1, or staging through shared
    // memory measured no faster: docs/cuda.md)
    auto codes_at = [](const uint8_t* p) -> uint4 { return __ldg(reinterpret_cast<const uint4*>(p)); };
    uint4 qa = codes_at(code_a + c_begin * 64), qb = codes_at(code_b + c_begin * 64);
    uint32_t sa = scale_at(scale_a + c_begin * 4 * kScaleBytes), sb = scale_at(scale_b + c_begin * 4 * kScaleBytes);
    for (int64_t c = c_begin; c < c_end; ++c) {
        uint32_t xb[2][3][8];
#pragma unroll
        for (int h = 0; h < 2; ++h) load_x16<F, kSelfSplit, kRepair>(xs, x, plane, x_row + c * kChunkCols + 16 * h, xb[h]);
        const int64_t cn = c + 1 < c_end ? c + 1 : c;  // the last chunk loads itself again rather than branch
        const uint4 na = codes_at(code_a + cn * 64), nb = codes_at(code_b + cn * 64);
        const uint32_t nsa = scale_at(scale_a + cn * 4 * kScaleBytes), nsb = scale_at(scale_b + cn * 4 * kScaleBytes);
        const bool small = F == int(WeightFormat::MXFP4) && small_scales(sa > sb ? sa : sb);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            uint32_t wa[8], wb[8];
            decode_nib16<F>(h ? qa.z : qa.x, h ? qa.w : qa.y, sa, small, wa);
            decode_nib16<F>(h ? qb.z : qb.x, h ? qb.w : qb.y, sb, small, wb);
#pragma unroll
            for (int s = 0; s < 4; ++s)
#pragma unroll
                for (int p = 2; p >= 0; --p)  // smallest part first, as mma_tile
                    mma_bf16(acc, wa[2 * s], wb[2 * s], wa[2 * s + 1], wb[2 * s + 1], xb[h][p][2 * s],
                             xb[h][p][2 * s + 1]);
        }
        qa = na, qb = nb, sa = nsa, sb = nsb;
    }
    const bool add = splits > 1 && part == nullptr && bz > 0;
    float* o = splits == 1 || part == nullptr ? y : part + bz * part_stride;
    auto put = [&](int64_t i, float v) { o[i] = add ? o[i] + v : v; };
    const int64_t x0 = n0 + 2 * t;
    if (x0 < n) put(x0 * R + ra, acc[0]), put(x0 * R + rb, acc[2]);
    if (x0 + 1 < n) put((x0 + 1) * R + ra, acc[1]), put((x0 + 1) * R + rb, acc[3]);
}

template <int F, int MT, int NT, bool kSelfSplit, bool kFull, bool kRepair = false>
__device__ __forceinline__ void mma_tile(const WDesc& w, const __nv_bfloat16* __restrict__ xs,
                                         const float* __restrict__ x, int64_t n, int64_t plane,
                                         float* __restrict__ y, float* __restrict__ part, int64_t part_stride,
                                         int splits, int64_t chunks_per_split, int64_t bx, int64_t by, int64_t bz) {
    if constexpr (kFull && MT == 1 && NT == 1 && nibble_pairs(F)) {
        mma_row_nibble<F, kSelfSplit, kRepair>(w, xs, x, n, plane, y, part, part_stride, splits, chunks_per_split, bx,
                                               by, bz);
        return;
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t R = w.rows, C = w.cols;
    const int64_t r0 = (bx * kBlockWarps + warp) * kWarpRows * MT;
    const int64_t n0 = by * 8 * NT;
    const int64_t n_chunks = (C + kChunkCols - 1) / kChunkCols;
    const int64_t c_begin = bz * chunks_per_split;
    const int64_t c_end = c_begin + chunks_per_split < n_chunks ? c_begin + chunks_per_split : n_chunks;
    int64_t ra[MT], rb[MT];
    bool va[MT], vb[MT];
#pragma unroll
    for (int m = 0; m < MT; ++m) {
        ra[m] = r0 + m * kWarpRows + g, rb[m] = ra[m] + 8;
        va[m] = ra[m] < R, vb[m] = rb[m] < R;
    }
    constexpr bool kPostScale = F == int(WeightFormat::FP8_E4M3_B128);

    float acc[MT][NT][4];
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int i = 0; i < NT; ++i) acc[m][i][0] = acc[m][i][1] = acc[m][i][2] = acc[m][i][3] = 0.0f;

    // One-row tiles are bound by loads in flight: two chunks unrolled let the second's loads issue before the first's
    // mmas wait. Wide tiles have loads enough and no registers to spare.
    constexpr int kUnroll = MT == 1 && NT == 1 ? 2 : 1;
#pragma unroll kUnroll
    for (int64_t c = c_begin; c < c_end; ++c) {
        const int64_t colt = c * kChunkCols + 32 * t;
        const bool vc = colt < C;
        float part[MT][NT][4];
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int i = 0; i < NT; ++i) part[m][i][0] = part[m][i][1] = part[m][i][2] = part[m][i][3] = 0.0f;
        float (&dst)[MT][NT][4] = kPostScale ? part : acc;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int64_t col0 = colt + 16 * h;
            uint32_t wa[MT][8], wb[MT][8];
#pragma unroll
            for (int m = 0; m < MT; ++m) {
                if constexpr (!kFull)
#pragma unroll
                    for (int k = 0; k < 8; ++k) wa[m][k] = wb[m][k] = 0u;
                if (kFull || (vc && va[m])) load16<F>(w, ra[m], col0, wa[m]);
                if (kFull || (vc && vb[m])) load16<F>(w, rb[m], col0, wb[m]);
            }
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const int64_t xr = n0 + nt * 8 + g;
                uint32_t xb[3][8];
                if ((kFull || vc) && xr < n) {
                    load_x16<F, kSelfSplit, kRepair>(xs, x, plane, xr * C + col0, xb);
                } else {
#pragma unroll
                    for (int p = 0; p < 3; ++p)
#pragma unroll
                        for (int k = 0; k < 8; ++k) xb[p][k] = 0u;
                }
#pragma unroll
                for (int s = 0; s < 4; ++s)
#pragma unroll
                    for (int p = 2; p >= 0; --p)  // smallest part first
#pragma unroll
                        for (int m = 0; m < MT; ++m)
                            mma_bf16(dst[m][nt], wa[m][2 * s], wb[m][2 * s], wa[m][2 * s + 1], wb[m][2 * s + 1],
                                     xb[p][2 * s], xb[p][2 * s + 1]);
            }
        }
        if constexpr (kPostScale) {
            const int64_t tiles = (C + 127) / 128;
            const float* sc = reinterpret_cast<const float*>(w.scales);
#pragma unroll
            for (int m = 0; m < MT; ++m) {
                const float sa = kFull || va[m] ? __ldg(sc + (ra[m] / 128) * tiles + c) : 0.0f;
                const float sb = kFull || vb[m] ? __ldg(sc + (rb[m] / 128) * tiles + c) : 0.0f;
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    acc[m][nt][0] = fmaf(part[m][nt][0], sa, acc[m][nt][0]);
                    acc[m][nt][1] = fmaf(part[m][nt][1], sa, acc[m][nt][1]);
                    acc[m][nt][2] = fmaf(part[m][nt][2], sb, acc[m][nt][2]);
                    acc[m][nt][3] = fmaf(part[m][nt][3], sb, acc[m][nt][3]);
                }
            }
        }
    }
    // part == nullptr with splits > 1: the splits run one launch each, in order, each adding its sums to y (the first
    // storing them), which rounds exactly as reduce_kernel's sum of the parts does
    const bool add = splits > 1 && part == nullptr && bz > 0;
    float* o = splits == 1 || part == nullptr ? y : part + bz * part_stride;
    auto put = [&](int64_t i, float v) { o[i] = add ? o[i] + v : v; };
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const int64_t x0 = n0 + nt * 8 + 2 * t;
            if ((kFull || va[m]) && x0 < n) put(x0 * R + ra[m], acc[m][nt][0]);
            if ((kFull || va[m]) && x0 + 1 < n) put((x0 + 1) * R + ra[m], acc[m][nt][1]);
            if ((kFull || vb[m]) && x0 < n) put(x0 * R + rb[m], acc[m][nt][2]);
            if ((kFull || vb[m]) && x0 + 1 < n) put((x0 + 1) * R + rb[m], acc[m][nt][3]);
        }
}

// Whether this warp's rows of block bx all exist and k is whole chunks (the same for every lane of the warp). Only the
// one-row tiles take the path without bounds tests: for the wide ones the second copy of the loop cost registers
// (224 -> 255 and a stack frame for the 4x4 tile).
template <int MT>
__device__ __forceinline__ bool tile_is_full(const WDesc& w, int64_t bx) {
    const int64_t r_end = (bx * kBlockWarps + (threadIdx.x >> 5) + 1) * kWarpRows * MT;
    return r_end <= w.rows && w.cols % kChunkCols == 0;
}

// The split parts mma_kernel reads are in F's order (split_x with nibble_pairs(F)).
template <int F, int MT, int NT, bool kSelfSplit>
__global__ void __launch_bounds__(kBlockWarps * 32) mma_kernel(WDesc w, const __nv_bfloat16* __restrict__ xs,
                                                                const float* __restrict__ x, int64_t n,
                                                                float* __restrict__ y, float* __restrict__ part,
                                                                int64_t chunks_per_split) {
    if (MT * NT == 1 && tile_is_full<MT>(w, blockIdx.x))
        mma_tile<F, MT, NT, kSelfSplit, MT * NT == 1>(w, xs, x, n, n * w.cols, y, part, n * w.rows, int(gridDim.z),
                                                      chunks_per_split, blockIdx.x, blockIdx.y, blockIdx.z);
    else
        mma_tile<F, MT, NT, kSelfSplit, false>(w, xs, x, n, n * w.cols, y, part, n * w.rows, int(gridDim.z),
                                               chunks_per_split, blockIdx.x, blockIdx.y, blockIdx.z);
}

// The tiles of `count` weights of one format and shape (GroupJob: first_block ascending) in one launch: block b of
// the flat grid belongs to the last job whose first_block <= b.
template <int F, int MT, int NT, bool kSelfSplit>
__global__ void __launch_bounds__(kBlockWarps * 32) grouped_mma_kernel(const GroupJob* __restrict__ jobs, int count,
                                                                        int64_t plane, bool xs_nibble,
                                                                        int64_t part_stride, int splits,
                                                                        int64_t chunks_per_split, int split_index) {
    const int64_t b = blockIdx.x;
    int lo = 0, hi = count - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (jobs[mid].first_block <= b) lo = mid;
        else hi = mid - 1;
    }
    const GroupJob j = jobs[lo];
    const int64_t local = b - j.first_block;
    const int64_t bx = local % j.row_blocks, by = local / j.row_blocks;
    const int64_t bz = split_index < 0 ? int64_t(blockIdx.z) : int64_t(split_index);
    float* part = split_index < 0 ? j.part : nullptr;
    const bool full = MT * NT == 1 && tile_is_full<MT>(j.w, bx);
    if (nibble_pairs(F) && !xs_nibble) {  // a stage mixing formats split its rows in natural order
        if (full)
            mma_tile<F, MT, NT, kSelfSplit, MT * NT == 1, nibble_pairs(F)>(j.w, j.xs, j.x, j.n, plane, j.y, part,
                                                                           part_stride, splits, chunks_per_split, bx,
                                                                           by, bz);
        else
            mma_tile<F, MT, NT, kSelfSplit, false, nibble_pairs(F)>(j.w, j.xs, j.x, j.n, plane, j.y, part,
                                                                    part_stride, splits, chunks_per_split, bx, by, bz);
    } else if (full) {
        mma_tile<F, MT, NT, kSelfSplit, MT * NT == 1>(j.w, j.xs, j.x, j.n, plane, j.y, part, part_stride, splits,
                                                      chunks_per_split, bx, by, bz);
    } else {
        mma_tile<F, MT, NT, kSelfSplit, false>(j.w, j.xs, j.x, j.n, plane, j.y, part, part_stride, splits,
                                               chunks_per_split, bx, by, bz);
    }
}

__global__ void reduce_kernel(const float* __restrict__ part, int splits, int64_t count, float* __restrict__ y) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
        float s = part[i];
        for (int k = 1; k < splits; ++k) s += part[k * count + i];
        y[i] = s;
    }
}

template <int F>
__global__ void ffma_kernel(WDesc w, const float* __restrict__ x, int64_t n, float* __restrict__ y) {
    const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    const int64_t R = w.rows, C = w.cols;
    if (warp >= n * R) return;
    const int64_t i = warp / R, r = warp % R;
    const float* xi = x + i * C;
    float s = 0.0f;
    for (int64_t c = lane; c < C; c += 32) {
        float v;
        if constexpr (F == int(WeightFormat::F32)) {
            v = __ldg(reinterpret_cast<const float*>(w.data) + r * C + c);
        } else if constexpr (F == int(WeightFormat::F16)) {
            v = __half2float(__ushort_as_half(__ldg(reinterpret_cast<const unsigned short*>(w.data) + r * C + c)));
        } else if constexpr (F == int(WeightFormat::BF16)) {
            v = bf16_bits_value(__ldg(reinterpret_cast<const unsigned short*>(w.data) + r * C + c));
        } else {  // FP8 with its tile scale, as the reference dequantises it
            const auto h = __half2(__nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(__ldg(w.data + r * C + c)), __NV_E4M3));
            v = __low2float(h) * __ldg(reinterpret_cast<const float*>(w.scales) + (r / 128) * ((C + 127) / 128) + c / 128);
        }
        s = fmaf(v, xi[c], s);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0) y[i * R + r] = s;
}

unsigned grid_for(int64_t count, int threads) {
    const int64_t b = (count + threads - 1) / threads;
    return unsigned(b < 65535 * 8 ? (b > 0 ? b : 1) : 65535 * 8);
}

// The variants, by Tile::kind (tile_for). The tile over rows and n does not change any row's result (rows never mix
// in an mma, every tile walks k in the same order, and a row's parts are split by the same function wherever that
// happens), only the speed: narrow tiles that split their own activations for a few rows (one launch), wide ones
// that reuse each weight and activation load for many mmas when there are many. FP8's widest tile is 2x4: its
// per-chunk sums need a second set of registers.
template <int F, int Kind>
struct TileOf;
template <int F> struct TileOf<F, 0> { static constexpr int MT = 1, NT = 1; static constexpr bool kSelf = true; };
template <int F> struct TileOf<F, 1> { static constexpr int MT = 1, NT = 2; static constexpr bool kSelf = false; };
template <int F> struct TileOf<F, 2> { static constexpr int MT = 2, NT = 2; static constexpr bool kSelf = false; };
template <int F> struct TileOf<F, 3> {
    static constexpr int MT = F == int(WeightFormat::FP8_E4M3_B128) ? 2 : 4, NT = 4;
    static constexpr bool kSelf = false;
};
// kind 0's tile reading split_x's parts: an expert group splits its rows once for all its experts, where every warp
// of kind 0 splits its activations again for each 16 weight rows (for a nibble format that costs more instructions
// than decoding the weights)
template <int F> struct TileOf<F, 4> { static constexpr int MT = 1, NT = 1; static constexpr bool kSelf = false; };

template <int F, int Kind>
void launch(const WDesc& w, const MmaArgs& a, int64_t per_split, cudaStream_t s) {
    using T = TileOf<F, Kind>;
    const int64_t block_rows = int64_t(kWarpRows) * T::MT * kBlockWarps;
    const dim3 grid(unsigned((w.rows + block_rows - 1) / block_rows), unsigned((a.n + 8 * T::NT - 1) / (8 * T::NT)),
                    unsigned(a.splits));
    mma_kernel<F, T::MT, T::NT, T::kSelf><<<grid, kBlockWarps * 32, 0, s>>>(w, a.xs, a.x, a.n, a.y, a.part, per_split);
    if (a.splits > 1) reduce_kernel<<<grid_for(a.n * w.rows, 256), 256, 0, s>>>(a.part, a.splits, a.n * w.rows, a.y);
}

template <int F>
void launch_mma(const WDesc& w, const MmaArgs& a, cudaStream_t s) {
    const int64_t n_chunks = (w.cols + kChunkCols - 1) / kChunkCols;
    const int64_t per_split = (n_chunks + a.splits - 1) / a.splits;
    switch (tile_for(F, a.n).kind) {
        case 0: return launch<F, 0>(w, a, per_split, s);
        case 1: return launch<F, 1>(w, a, per_split, s);
        case 2: return launch<F, 2>(w, a, per_split, s);
        default: return launch<F, 3>(w, a, per_split, s);
    }
}

template <int F, int Kind>
void launch_grouped(const GroupLaunch& g, cudaStream_t s) {
    using T = TileOf<F, Kind>;
    const dim3 grid(unsigned(g.blocks), 1u, g.split_index < 0 ? unsigned(g.splits) : 1u);
    grouped_mma_kernel<F, T::MT, T::NT, T::kSelf><<<grid, kBlockWarps * 32, 0, s>>>(
        g.jobs, g.count, g.plane, g.xs_nibble, g.part_stride, g.splits, g.chunks_per_split, g.split_index);
}

template <int F>
void grouped_by_kind(int kind, const GroupLaunch& g, cudaStream_t s) {
    switch (kind) {
        case 0: return launch_grouped<F, 4>(g, s);  // the group has split its rows already
        case 1: return launch_grouped<F, 1>(g, s);
        case 2: return launch_grouped<F, 2>(g, s);
        default: return launch_grouped<F, 3>(g, s);
    }
}

__global__ void reduce_strided_kernel(const float* __restrict__ part, int splits, int64_t split_stride, int64_t count,
                                      float* __restrict__ y) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
        float s = part[i];
        for (int k = 1; k < splits; ++k) s += part[k * split_stride + i];
        y[i] = s;
    }
}

}  // namespace

bool mma_splits_itself(int64_t n) { return tile_for(int(WeightFormat::BF16), n).self_split; }

Tile tile_for(int format, int64_t n) {
    const int kind = n <= 8 ? 0 : n <= 16 ? 1 : n <= 64 ? 2 : 3;
    const int mt = kind == 0 || kind == 1 ? 1 : kind == 2 ? 2 : format == int(WeightFormat::FP8_E4M3_B128) ? 2 : 4;
    const int nt = kind == 0 ? 1 : kind == 3 ? 4 : 2;
    return {kind, int64_t(kWarpRows) * mt * kBlockWarps, int64_t(8) * nt, kind == 0};
}

void grouped_mma(int format, int kind, const GroupLaunch& g, cudaStream_t s) {
    switch (WeightFormat(format)) {
        case WeightFormat::BF16: return grouped_by_kind<int(WeightFormat::BF16)>(kind, g, s);
        case WeightFormat::MXFP4: return grouped_by_kind<int(WeightFormat::MXFP4)>(kind, g, s);
        case WeightFormat::INT4_G32: return grouped_by_kind<int(WeightFormat::INT4_G32)>(kind, g, s);
        case WeightFormat::FP8_E4M3_B128: return grouped_by_kind<int(WeightFormat::FP8_E4M3_B128)>(kind, g, s);
        default: return;
    }
}

void reduce_splits(const float* part, int splits, int64_t split_stride, float* y, int64_t count, cudaStream_t s) {
    reduce_strided_kernel<<<grid_for(count, 256), 256, 0, s>>>(part, splits, split_stride, count, y);
}

void split_x(const float* x, int64_t count, __nv_bfloat16* parts, int64_t plane, bool nibble, cudaStream_t s) {
    split_x_kernel<<<grid_for(count, 256), 256, 0, s>>>(x, count, parts, plane, nibble);
}

void mma_matmul(const WDesc& w, const MmaArgs& a, cudaStream_t s) {
    switch (WeightFormat(w.format)) {
        case WeightFormat::BF16: return launch_mma<int(WeightFormat::BF16)>(w, a, s);
        case WeightFormat::MXFP4: return launch_mma<int(WeightFormat::MXFP4)>(w, a, s);
        case WeightFormat::INT4_G32: return launch_mma<int(WeightFormat::INT4_G32)>(w, a, s);
        case WeightFormat::FP8_E4M3_B128: return launch_mma<int(WeightFormat::FP8_E4M3_B128)>(w, a, s);
        default: return;
    }
}


void ffma_matmul(const WDesc& w, const float* x, int64_t n, float* y, cudaStream_t s) {
    const int64_t threads = n * w.rows * 32;
    const unsigned blocks = unsigned((threads + 255) / 256);
    switch (WeightFormat(w.format)) {
        case WeightFormat::F32: ffma_kernel<int(WeightFormat::F32)><<<blocks, 256, 0, s>>>(w, x, n, y); break;
        case WeightFormat::F16: ffma_kernel<int(WeightFormat::F16)><<<blocks, 256, 0, s>>>(w, x, n, y); break;
        case WeightFormat::BF16: ffma_kernel<int(WeightFormat::BF16)><<<blocks, 256, 0, s>>>(w, x, n, y); break;
        default: ffma_kernel<int(WeightFormat::FP8_E4M3_B128)><<<blocks, 256, 0, s>>>(w, x, n, y); break;
    }
}

}  // namespace sluice::cuda::kernels
