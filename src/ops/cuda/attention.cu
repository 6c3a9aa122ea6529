// Causal attention on the GPU (ops::attention's contract, ops/ops.h; the exactness argument is in backend.h).
//
// A block takes 32 (row, head) units that share a kv head and walks the keys in tiles of 32 at absolute positions
// (tile i holds keys 32i..32i+31, whatever the rows of the block): the queries and the tile's keys (and values, unless
// they are the keys' first columns, as MLA's latents are) sit in shared memory. Four threads own a unit: each scores
// 8 of the tile's keys (a dot product in key-column order), the four agree on the tile's maximum and sum by shuffles
// in a fixed order, and each accumulates a quarter of the unit's output columns: an online softmax in f32, rescaled
// only by tiles that hold a key the unit sees. So a unit's arithmetic depends on its query, its position and its keys
// alone, never on which other units share its block. The keys are also split into fixed ranges of 256 (a grid
// dimension: a decode row's 64 heads would otherwise be two blocks of work for the whole card), each range's
// partial result kept and the ranges a unit sees combined in order by a second kernel.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/cuda/backend_state.cuh"

namespace sluice::cuda {

using namespace detail;

namespace {

constexpr int kUnits = 32;    // (row, head) units per block
constexpr int kKeys = 32;     // keys per tile
constexpr int kThreads = 128;  // four per unit
constexpr uint64_t kMaxSmemBytes = 220 * 1024;  // below the 227 KiB a block may opt into, with room for the static part
constexpr uint64_t kPieceBytes = uint64_t(64) << 20;  // pinned staging per copy
constexpr uint64_t kPartBytes = uint64_t(1) << 30;  // partial results per piece of rows
constexpr int kSplitKeys = 256;  // keys per split: split s of every unit covers keys [256 s, 256 s + 256)

struct Args {
    const float* q;       // [n_rows, H, dk]
    const float* k;       // key t at k + (t - t0) * kw + g * dk
    const float* v;       // value t at v + (t - t0) * vw + g * dv (v == k when the values are the keys' columns)
    const int64_t* pos;   // [n_rows]
    const float* sinks;   // [H] or null
    float* out;           // [n_rows, H, dv]
    float* part;          // [n_kv][units][n_splits][dv + 2]: each split's unnormalised output, then its max and sum
    int64_t n_rows, H, n_kv, dk, dv, kw, vw, t0, window, n_splits;
    float scale;
    int values_in_keys;
};

uint64_t smem_bytes(int64_t dk, int64_t dv, bool vik) {
    const uint64_t floats = uint64_t(kUnits) * uint64_t(dk + 1) + uint64_t(kKeys) * uint64_t(dk + 1) +
                            (vik ? 0 : uint64_t(kKeys) * uint64_t(dv + 1)) + uint64_t(kUnits) * (kKeys + 1);
    return floats * 4;
}

template <int DVQ>  // output columns per thread: ceil(dv / 4) <= DVQ
__global__ void __launch_bounds__(kThreads) attention_kernel(Args a) {
    extern __shared__ float sm[];
    const int tid = threadIdx.x, u = tid >> 2, qd = tid & 3, warp = tid >> 5, lane = tid & 31;
    const int dk = int(a.dk), dv = int(a.dv);
    const int64_t group = a.H / a.n_kv, g = blockIdx.y, per_kv = a.n_rows * group;
    const int64_t unit0 = int64_t(blockIdx.x) * kUnits;
    const int dkp = dk + 1, dvp = a.values_in_keys ? dkp : dv + 1;
    float* Qs = sm;
    float* Ks = Qs + kUnits * dkp;
    float* Vs = a.values_in_keys ? Ks : Ks + kKeys * dkp;
    float* Ps = Ks + kKeys * dkp + (a.values_in_keys ? 0 : kKeys * dvp);
    __shared__ long long s_lo, s_hi;

    const int64_t unit = unit0 + u;
    const bool live = unit < per_kv;
    const int64_t r = live ? unit / group : 0, h = g * group + (live ? unit % group : 0);
    const int64_t hi = live ? a.pos[r] + 1 : 0;
    const int64_t lo = live && a.window > 0 ? max(int64_t(0), hi - a.window) : 0;

    // a warp per row, lanes along it: no division in the copies
    for (int uu = warp; uu < kUnits; uu += kThreads / 32) {
        const int64_t un = unit0 + uu;
        const float* src = un < per_kv ? a.q + ((un / group) * a.H + g * group + un % group) * a.dk : nullptr;
        for (int d = lane; d < dk; d += 32) Qs[uu * dkp + d] = src ? src[d] : 0.0f;
    }
    if (tid == 0) {  // the keys any unit of the block sees
        long long l0 = LLONG_MAX, h0 = 0;
        for (int i = 0; i < kUnits && unit0 + i < per_kv; ++i) {
            const long long hh = a.pos[(unit0 + i) / group] + 1;
            const long long ll = a.window > 0 ? max(0ll, hh - (long long)a.window) : 0;
            l0 = min(l0, ll);
            h0 = max(h0, hh);
        }
        s_lo = l0;
        s_hi = h0;
    }
    __syncthreads();
    const int64_t split = blockIdx.z, s0 = split * kSplitKeys;
    const int64_t blo = max(int64_t(s_lo), s0), bhi = min(int64_t(s_hi), s0 + kSplitKeys);
    // no unit of the block sees a key of this split, so none reads its partials (but split 0 carries the sinks)
    if (blo >= bhi && !(a.sinks && split == 0)) return;

    const bool sink = live && a.sinks && split == 0;  // the sink joins the first split's sum
    float m = sink ? a.sinks[h] : -INFINITY;
    float l = sink ? 1.0f : 0.0f;  // exp(sink - m) with m = sink
    float o[DVQ];
#pragma unroll
    for (int c = 0; c < DVQ; ++c) o[c] = 0.0f;
    const float* qrow = Qs + u * dkp;
    float* prow = Ps + u * (kKeys + 1);

    for (int64_t tb = (blo / kKeys) * kKeys; tb < bhi; tb += kKeys) {
        for (int j = warp; j < kKeys; j += kThreads / 32) {
            const int64_t t = tb + j;
            const bool in = t >= blo && t < bhi;
            const float* ks = in ? a.k + (t - a.t0) * a.kw + g * a.dk : nullptr;
            for (int d = lane; d < dk; d += 32) Ks[j * dkp + d] = in ? ks[d] : 0.0f;
            if (!a.values_in_keys) {
                const float* vs = in ? a.v + (t - a.t0) * a.vw + g * a.dv : nullptr;
                for (int d = lane; d < dv; d += 32) Vs[j * dvp + d] = in ? vs[d] : 0.0f;
            }
        }
        __syncthreads();

        float s[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) s[i] = 0.0f;
        const float* kcol = Ks + qd * dkp;
#pragma unroll 4
        for (int d = 0; d < dk; ++d) {
            const float qv = qrow[d];
#pragma unroll
            for (int i = 0; i < 8; ++i) s[i] = fmaf(qv, kcol[4 * i * dkp + d], s[i]);
        }
        float tmax = -INFINITY;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int64_t t = tb + qd + 4 * i;
            if (t >= lo && t < hi) {
                s[i] *= a.scale;
                tmax = fmaxf(tmax, s[i]);
            } else {
                s[i] = -INFINITY;
            }
        }
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 2));
        const bool any = tmax != -INFINITY;  // the same for the unit's four threads
        const float mnew = any ? fmaxf(m, tmax) : m;
        float psum = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const float p = any && s[i] != -INFINITY ? expf(s[i] - mnew) : 0.0f;
            prow[qd + 4 * i] = p;
            psum += p;
        }
        // (a + b) + (c + d) in every lane of the unit: addition commutes, so the four agree bit for bit
        psum += __shfl_xor_sync(0xffffffffu, psum, 1);
        psum += __shfl_xor_sync(0xffffffffu, psum, 2);
        __syncwarp();
        if (any) {
            const float alpha = expf(m - mnew);
            l = l * alpha + psum;
            m = mnew;
#pragma unroll
            for (int c = 0; c < DVQ; ++c) o[c] *= alpha;
            const float* vcol = Vs + qd;
            if (4 * DVQ == dv) {
                for (int j = 0; j < kKeys; ++j) {
                    const float p = prow[j];
#pragma unroll
                    for (int c = 0; c < DVQ; ++c) o[c] = fmaf(p, vcol[j * dvp + 4 * c], o[c]);
                }
            } else {
                for (int j = 0; j < kKeys; ++j) {
                    const float p = prow[j];
#pragma unroll
                    for (int c = 0; c < DVQ; ++c)
                        if (qd + 4 * c < dv) o[c] = fmaf(p, vcol[j * dvp + 4 * c], o[c]);
                }
            }
        }
        __syncthreads();
    }
    if (live) {  // this split's partial result, combined in split order by combine_kernel
        float* dst = a.part + ((g * per_kv + unit) * a.n_splits + split) * (a.dv + 2);
#pragma unroll
        for (int c = 0; c < DVQ; ++c)
            if (qd + 4 * c < dv) dst[qd + 4 * c] = o[c];
        if (qd == 0) dst[dv] = m, dst[dv + 1] = l;
    }
}

// out = sum_s o_s e^(m_s - M) / sum_s l_s e^(m_s - M) over the unit's splits in order (M their maximum): the splits a
// unit has are fixed by its own position, so this order, too, is the unit's own.
__global__ void combine_kernel(Args a) {
    const int64_t group = a.H / a.n_kv, per_kv = a.n_rows * group;
    const int64_t gu = blockIdx.x, g = gu / per_kv, unit = gu - g * per_kv;
    const int64_t r = unit / group, h = g * group + unit % group;
    const int64_t hi = a.pos[r] + 1, lo = a.window > 0 ? max(int64_t(0), hi - a.window) : 0;
    // the splits holding keys the unit sees, and split 0 for a sink (written by every block of split 0)
    const int64_t first = lo / kSplitKeys, last = (hi - 1) / kSplitKeys;
    const int64_t extra = a.sinks && first > 0 ? 1 : 0, count = extra + last - first + 1;
    const float* p = a.part + gu * a.n_splits * (a.dv + 2);
    auto at = [&](int64_t i) { return p + (i < extra ? 0 : first + i - extra) * (a.dv + 2); };
    float M = -INFINITY;
    for (int64_t i = 0; i < count; ++i) M = fmaxf(M, at(i)[a.dv]);
    float L = 0.0f;
    for (int64_t i = 0; i < count; ++i)
        if (at(i)[a.dv] != -INFINITY) L += at(i)[a.dv + 1] * expf(at(i)[a.dv] - M);
    const float inv = 1.0f / L;
    float* dst = a.out + (r * a.H + h) * a.dv;
    for (int64_t c = threadIdx.x; c < a.dv; c += blockDim.x) {
        float acc = 0.0f;
        for (int64_t i = 0; i < count; ++i)
            if (at(i)[a.dv] != -INFINITY) acc += at(i)[c] * expf(at(i)[a.dv] - M);
        dst[c] = acc * inv;
    }
}

template <int DVQ>
void launch(const Args& a, uint64_t smem, cudaStream_t s) {
    static bool configured = false;  // under the backend's lock
    if (!configured) {
        CK(cudaFuncSetAttribute(attention_kernel<DVQ>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMaxSmemBytes)));
        configured = true;
    }
    const int64_t units = a.n_rows * (a.H / a.n_kv);
    const dim3 grid(unsigned((units + kUnits - 1) / kUnits), unsigned(a.n_kv), unsigned(a.n_splits));
    attention_kernel<DVQ><<<grid, kThreads, smem, s>>>(a);
    CK(cudaGetLastError());
    combine_kernel<<<unsigned(units * a.n_kv), 128, 0, s>>>(a);
    CK(cudaGetLastError());
}

bool values_in_keys(const AttentionShape& a, const Rows& k, const Rows& v) {
    return k.same(v) && a.n_kv_heads == 1 && a.head_dim_v <= a.head_dim_k;
}

}  // namespace

bool attention_supports(const AttentionShape& a, const Rows& k, const Rows& v) {
    const bool vik = values_in_keys(a, k, v);
    return a.head_dim_k > 0 && a.head_dim_v > 0 && a.head_dim_v <= 4 * 128 &&
           smem_bytes(a.head_dim_k, a.head_dim_v, vik) <= kMaxSmemBytes;
}

void attention(const AttentionShape& a, const float* q, int64_t n_rows, const int64_t* pos, const Rows& k,
               const Rows& v, float* out) {
    SLUICE_CHECK(a.n_heads > 0 && a.n_kv_heads > 0 && a.n_heads % a.n_kv_heads == 0, "CUDA attention: ", a.n_heads,
                 " heads over ", a.n_kv_heads, " kv heads");
    const bool vik = values_in_keys(a, k, v);
    SLUICE_CHECK(attention_supports(a, k, v), "CUDA attention: head sizes ", a.head_dim_k, "/", a.head_dim_v,
                 " do not fit the kernel's tiles");
    if (n_rows <= 0) return;
    const int64_t H = a.n_heads, dk = a.head_dim_k, dv = a.head_dim_v;
    int64_t kmin = INT64_MAX, kmax = 0;
    for (int64_t r = 0; r < n_rows; ++r) {
        SLUICE_CHECK(pos[r] >= 0, "CUDA attention: row ", r, " at negative position ", pos[r]);
        const int64_t hi = pos[r] + 1, lo = a.window > 0 ? std::max<int64_t>(0, hi - a.window) : 0;
        kmin = std::min(kmin, lo);
        kmax = std::max(kmax, hi);
    }
    const int64_t T = kmax - kmin, kw = a.n_kv_heads * dk, vw = a.n_kv_heads * dv;

    auto& b = backend();
    std::lock_guard lock(b.mu);
    const auto t_start = std::chrono::steady_clock::now();
    const cudaStream_t st = b.stream();
    // pieces of queries small enough for the staging: q, out and positions of `rows_per_piece` rows
    const int64_t n_splits = (kmax + kSplitKeys - 1) / kSplitKeys;
    const uint64_t row_bytes = uint64_t(H) * uint64_t(dk + dv) * 4 + 8;
    const uint64_t row_part_bytes = uint64_t(H) * uint64_t(n_splits) * uint64_t(dv + 2) * 4;
    const int64_t rows_per_piece = std::max<int64_t>(
        1, std::min({n_rows, int64_t(kPieceBytes / row_bytes), int64_t(kPartBytes / row_part_bytes)}));
    const uint64_t q_bytes = uint64_t(rows_per_piece) * uint64_t(H * dk) * 4,
                   out_bytes = uint64_t(rows_per_piece) * uint64_t(H * dv) * 4, pos_bytes = uint64_t(rows_per_piece) * 8;
    const uint64_t sink_bytes = a.sinks ? uint64_t(H) * 4 : 0;
    const uint64_t k_bytes = uint64_t(T) * uint64_t(kw) * 4, v_bytes = vik ? 0 : uint64_t(T) * uint64_t(vw) * 4;
    auto* kv = static_cast<uint8_t*>(b.grow(b.attn_kv_, align_up(k_bytes, 256) + v_bytes, "attention's keys and values"));
    const uint64_t part_bytes = uint64_t(rows_per_piece) * row_part_bytes;
    const uint64_t io_bytes =
        align_up(q_bytes, 256) + align_up(out_bytes, 256) + align_up(pos_bytes, 256) + align_up(sink_bytes, 256) + part_bytes;
    auto* io = static_cast<uint8_t*>(b.grow(b.attn_io_, io_bytes, "attention's queries and outputs"));
    float* kd = reinterpret_cast<float*>(kv);
    float* vd = vik ? kd : reinterpret_cast<float*>(kv + align_up(k_bytes, 256));
    float* qdev = reinterpret_cast<float*>(io);
    float* odev = reinterpret_cast<float*>(io + align_up(q_bytes, 256));
    auto* pdev = reinterpret_cast<int64_t*>(io + align_up(q_bytes, 256) + align_up(out_bytes, 256));
    float* sdev = reinterpret_cast<float*>(io + align_up(q_bytes, 256) + align_up(out_bytes, 256) + align_up(pos_bytes, 256));
    float* part = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(sdev) + align_up(sink_bytes, 256));

    const uint64_t widest_row = uint64_t(std::max(kw, vw)) * 4;
    const int64_t keys_per_piece = std::max<int64_t>(1, int64_t(kPieceBytes / widest_row));
    auto* h = static_cast<uint8_t*>(
        b.pinned(std::max({q_bytes + pos_bytes + sink_bytes, out_bytes, uint64_t(keys_per_piece) * widest_row})));
    // keys (and values) from kmin to kmax, gathered row by row from the cache's pages
    auto upload_rows = [&](const Rows& rows, int64_t width, float* dst) {
        for (int64_t t0 = 0; t0 < T; t0 += keys_per_piece) {
            const int64_t cnt = std::min(keys_per_piece, T - t0);
            for (int64_t i = 0; i < cnt; ++i)
                std::memcpy(h + uint64_t(i * width) * 4, rows.row(kmin + t0 + i), size_t(width) * 4);
            CK(cudaMemcpyAsync(dst + t0 * width, h, uint64_t(cnt * width) * 4, cudaMemcpyHostToDevice, st));
            CK(cudaStreamSynchronize(st));  // the staging is refilled next
        }
    };
    upload_rows(k, kw, kd);
    if (!vik) upload_rows(v, vw, vd);

    Args args{qdev, kd, vd, pdev, a.sinks ? sdev : nullptr, odev, part, 0, H, a.n_kv_heads, dk, dv, kw, vw, kmin,
              a.window, n_splits, a.scale, vik ? 1 : 0};
    const uint64_t smem = smem_bytes(dk, dv, vik);
    for (int64_t r0 = 0; r0 < n_rows; r0 += rows_per_piece) {
        const int64_t cnt = std::min(rows_per_piece, n_rows - r0);
        const uint64_t qb = uint64_t(cnt * H * dk) * 4;
        std::memcpy(h, q + r0 * H * dk, qb);
        std::memcpy(h + qb, pos + r0, size_t(cnt) * 8);
        if (a.sinks) std::memcpy(h + qb + uint64_t(cnt) * 8, a.sinks, sink_bytes);
        CK(cudaMemcpyAsync(qdev, h, qb, cudaMemcpyHostToDevice, st));
        CK(cudaMemcpyAsync(pdev, h + qb, uint64_t(cnt) * 8, cudaMemcpyHostToDevice, st));
        if (a.sinks) CK(cudaMemcpyAsync(sdev, h + qb + uint64_t(cnt) * 8, sink_bytes, cudaMemcpyHostToDevice, st));
        args.n_rows = cnt;
        if (dv <= 64) {
            launch<16>(args, smem, st);
        } else if (dv <= 128) {
            launch<32>(args, smem, st);
        } else if (dv <= 256) {
            launch<64>(args, smem, st);
        } else {
            launch<128>(args, smem, st);
        }
        const uint64_t ob = uint64_t(cnt * H * dv) * 4;
        CK(cudaMemcpyAsync(h, odev, ob, cudaMemcpyDeviceToHost, st));
        CK(cudaStreamSynchronize(st));
        std::memcpy(out + r0 * H * dv, h, ob);
        b.stats.h2d_bytes += qb + uint64_t(cnt) * 8 + sink_bytes;
        b.stats.d2h_bytes += ob;
    }
    b.stats.h2d_bytes += k_bytes + v_bytes;
    b.stats.attention_kv_bytes += k_bytes + v_bytes;
    b.stats.attention_calls++;
    b.stats.attention_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start).count();
}

}  // namespace sluice::cuda
