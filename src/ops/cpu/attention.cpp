// CPU attention: scores in f32 with a max-subtracted softmax, one (row, head) pair at a time in arithmetic, but in
// tiles of up to kTile pairs that share a kv head, walked over the keys and values in blocks of kBlock rows: each
// block is read once for the whole tile while it is in cache, instead of once per pair (multi-query attention over a
// long cached context — MLA's latents after a prefix-cache hit — was bound by reading the context once per head and
// row). Inside a block the keys go in groups of kKeys and the values' columns in slices of kCols, each group or slice
// used by every pair of the tile before the next (a group of 8 keys of 576 floats is 18 KiB, a slice of 64 values'
// 64 columns 16 KiB: they stay in the L1 cache across the pairs, where walking one pair through the whole block read
// it from L2 once per pair, and L2's bandwidth bound the loops). Every pair still computes its scores, softmax and
// weighted sum of values in key order with the same operations, so the result is bit for bit what one pair at a time
// gives, whatever the tiling or the thread split. Pairs that see a whole key group (or value block) go four at a time
// where the path has four-pair loops (AVX-512: each key or value load then serves four queries).
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "ops/cpu/kernels.h"
#include "ops/cpu/simd.h"
#include "ops/cuda/backend.h"
#include "ops/exec_context.h"
#include "ops/ops.h"

namespace sluice::ops {

namespace {
constexpr int64_t kTile = 32;   // (row, head) pairs that walk the keys together
constexpr int64_t kBlock = 64;  // key rows per block (a page of the caches)
constexpr int64_t kKeys = 8;    // keys a group: every pair's dots with them before the next group
constexpr int64_t kCols = 64;   // value columns a slice: every pair's sums over them before the next slice

void portable_dots(const float* q, const float* const* keys, int64_t n_keys, int64_t n, float scale, float* out) {
    for (int64_t t = 0; t < n_keys; ++t) out[t] = cpu::dot_f32(q, keys[t], n) * scale;
}
void portable_axpys(const float* p, const float* const* values, int64_t n_values, float* acc, int64_t n) {
    for (int64_t t = 0; t < n_values; ++t)
        for (int64_t j = 0; j < n; ++j) acc[j] += p[t] * values[t][j];
}

// the four-pair loops (kernels.h); a path without them runs pairs one at a time
using Dots4 = void (*)(const float* const*, const float* const*, int64_t, int64_t, float, float* const*);
using Axpys4 = void (*)(const float* const*, const float* const*, int64_t, float* const*, int64_t);

struct Pair {
    int64_t lo = 0, hi = 0, h = 0;
    const float* q = nullptr;
    float* out = nullptr;
    float mx = 0, sum = 0;
};
}  // namespace

void attention(const AttentionParams& p, const float* q, int64_t n_rows, const int64_t* pos, RowView k, RowView v,
               float* out, ExecContext& ctx) {
    if (ctx.backend() == Backend::Cuda) {  // where the head sizes fit its tiles (a property of the layer alone)
        const cuda::AttentionShape s{p.n_heads, p.n_kv_heads, p.head_dim_k, p.head_dim_v, p.scale, p.sinks, p.window};
        const cuda::Rows kr{k.pages, k.first, k.page_shift, k.stride}, vr{v.pages, v.first, v.page_shift, v.stride};
        if (cuda::attention_supports(s, kr, vr))
            return cuda::attention(s, q, n_rows, pos, kr, vr, out);
    }
    cpu::attention(p, q, n_rows, pos, k, v, out, ctx.pool());
}

void cpu::attention(const AttentionParams& p, const float* q, int64_t n_rows, const int64_t* pos, RowView k,
                    RowView v, float* out, ThreadPool& pool) {
    const int64_t group = p.n_heads / p.n_kv_heads, dk = p.head_dim_k, dv = p.head_dim_v;
    const int64_t per_kv = n_rows * group;  // pairs are numbered kv head major, then row, then head in the group
    // the same bits on every path (avx512_attention.cpp): only the speed differs
    // four pairs at once where a path has it (pairs that cover the whole key group or block); null: one at a time
    Dots4 dots4 = nullptr;
    Axpys4 axpys4 = nullptr;
#if defined(SLUICE_CPU_X86)
    auto dots = portable_dots;
    auto axpys = portable_axpys;
    switch (cpu_path()) {
        case CpuPath::Avx512:
        case CpuPath::Amx:
            dots = cpu::avx512::attention_dots;
            axpys = cpu::avx512::attention_axpys;
            dots4 = cpu::avx512::attention_dots4;
            axpys4 = cpu::avx512::attention_axpys4;
            break;
        case CpuPath::Avx2:
            dots = cpu::avx2::attention_dots;
            axpys = cpu::avx2::attention_axpys;
            break;
        default:
            break;
    }
#else
    const auto dots = portable_dots;
    const auto axpys = portable_axpys;
#endif
    pool.parallel_for(n_rows * p.n_heads, [&](int64_t b, int64_t e) {
        // per thread, kept between calls: they grow with the context, then stop allocating
        thread_local std::vector<float> s, acc;
        std::array<Pair, kTile> tile;
        std::array<const float*, kBlock> kp, vp, vc;  // the block's key and value rows; vc: from a slice's column
        for (int64_t t0 = b; t0 < e;) {
            const int64_t g = t0 / per_kv;
            const int64_t t1 = std::min({e, t0 + kTile, (g + 1) * per_kv});
            const int64_t n = t1 - t0;
            int64_t first = INT64_MAX, last = 0;
            for (int64_t i = 0; i < n; ++i) {
                const int64_t within = t0 + i - g * per_kv, r = within / group;
                Pair& x = tile[size_t(i)];
                x.h = g * group + within % group;
                x.hi = pos[r] + 1;
                x.lo = p.window > 0 ? std::max<int64_t>(0, x.hi - p.window) : 0;
                x.q = q + (r * p.n_heads + x.h) * dk;
                x.out = out + (r * p.n_heads + x.h) * dv;
                x.mx = p.sinks ? p.sinks[x.h] : -INFINITY;
                first = std::min(first, x.lo);
                last = std::max(last, x.hi);
            }
            const int64_t span = last - first;
            s.resize(size_t(n * span));
            // scores, a block of keys at a time
            for (int64_t k0 = first; k0 < last; k0 += kBlock) {
                const int64_t k1 = std::min(last, k0 + kBlock);
                for (int64_t t = k0; t < k1; ++t) kp[size_t(t - k0)] = k.row(t) + g * dk;
                for (int64_t g0 = k0; g0 < k1; g0 += kKeys) {
                    const int64_t g1 = std::min(k1, g0 + kKeys);
                    int64_t whole[kTile], n_whole = 0;  // pairs that see every key of the group, four at a time
                    for (int64_t i = 0; i < n; ++i) {
                        Pair& x = tile[size_t(i)];
                        float* si = s.data() + i * span;  // si[t - first]: key t's score
                        const int64_t a = std::max(g0, x.lo), z = std::min(g1, x.hi);
                        if (a >= z) continue;
                        if (dots4 && a == g0 && z == g1) {
                            whole[n_whole++] = i;
                            continue;
                        }
                        dots(x.q, kp.data() + (a - k0), z - a, dk, p.scale, si + (a - first));
                        for (int64_t t = a; t < z; ++t) x.mx = std::max(x.mx, si[t - first]);
                    }
                    int64_t w = 0;
                    for (; w + 4 <= n_whole; w += 4) {
                        const float* qs[4];
                        float* outs[4];
                        for (int m = 0; m < 4; ++m) {
                            qs[m] = tile[size_t(whole[w + m])].q;
                            outs[m] = s.data() + whole[w + m] * span + (g0 - first);
                        }
                        dots4(qs, kp.data() + (g0 - k0), g1 - g0, dk, p.scale, outs);
                    }
                    for (; w < n_whole; ++w)
                        dots(tile[size_t(whole[w])].q, kp.data() + (g0 - k0), g1 - g0, dk, p.scale,
                             s.data() + whole[w] * span + (g0 - first));
                    for (int64_t ww = 0; ww < n_whole; ++ww) {
                        Pair& x = tile[size_t(whole[ww])];
                        const float* si = s.data() + whole[ww] * span;
                        for (int64_t t = g0; t < g1; ++t) x.mx = std::max(x.mx, si[t - first]);
                    }
                }
            }
            for (int64_t i = 0; i < n; ++i) {
                Pair& x = tile[size_t(i)];
                float* si = s.data() + i * span;
                float sum = p.sinks ? std::exp(p.sinks[x.h] - x.mx) : 0.0f;
                for (int64_t t = x.lo; t < x.hi; ++t) sum += (si[t - first] = std::exp(si[t - first] - x.mx));
                x.sum = sum;
            }
            // the weighted sum of values, a block at a time
            acc.assign(size_t(n * dv), 0.0f);
            for (int64_t k0 = first; k0 < last; k0 += kBlock) {
                const int64_t k1 = std::min(last, k0 + kBlock);
                for (int64_t t = k0; t < k1; ++t) vp[size_t(t - k0)] = v.row(t) + g * dv;
                for (int64_t c0 = 0; c0 < dv; c0 += kCols) {
                    const int64_t cols = std::min(kCols, dv - c0);
                    for (int64_t t = k0; t < k1; ++t) vc[size_t(t - k0)] = vp[size_t(t - k0)] + c0;
                    int64_t whole[kTile], n_whole = 0;  // pairs that see every value of the block, four at a time
                    for (int64_t i = 0; i < n; ++i) {
                        const Pair& x = tile[size_t(i)];
                        const int64_t a = std::max(k0, x.lo), z = std::min(k1, x.hi);
                        if (axpys4 && a == k0 && z == k1)
                            whole[n_whole++] = i;
                        else if (a < z)
                            axpys(s.data() + i * span + (a - first), vc.data() + (a - k0), z - a,
                                  acc.data() + i * dv + c0, cols);
                    }
                    int64_t w = 0;
                    for (; w + 4 <= n_whole; w += 4) {
                        const float* ps[4];
                        float* accs[4];
                        for (int m = 0; m < 4; ++m) {
                            ps[m] = s.data() + whole[w + m] * span + (k0 - first);
                            accs[m] = acc.data() + whole[w + m] * dv + c0;
                        }
                        axpys4(ps, vc.data(), k1 - k0, accs, cols);
                    }
                    for (; w < n_whole; ++w)
                        axpys(s.data() + whole[w] * span + (k0 - first), vc.data(), k1 - k0,
                              acc.data() + whole[w] * dv + c0, cols);
                }
            }
            for (int64_t i = 0; i < n; ++i) {
                const Pair& x = tile[size_t(i)];
                const float inv = 1.0f / x.sum;
                for (int64_t j = 0; j < dv; ++j) x.out[j] = acc[size_t(i * dv + j)] * inv;
            }
            t0 = t1;
        }
    });
}

}  // namespace sluice::ops
