// KDA's gated delta rule on the GPU, recurrent form (ops/kda.h; ops::kda_recurrent_heads dispatches here).
//
// A block owns one head's state S [D, D] (k-major) for the whole call, in registers: thread (b, p) holds column b's
// rows a = p, p + 4, p + 8, ... (four parts of the rows; D <= 128, so at most 32 values a thread and 512 threads).
// Each token is three steps, each sum in a fixed order: (1) decay the held rows by exp(g) and form the part's share
// of mem[b] = sum_a S[a, b] k[a]; (2) every thread adds the four parts in order 0..3, takes
// delta[b] = beta (v[b] - mem[b]), updates S += k delta^T and forms its share of o[b] = sum_a S[a, b] q[a]; (3) the
// part-0 thread adds the four shares in order and writes o. The arithmetic of a token depends only on the state and
// that token's inputs, so a sequence's rows give the same bits in one call as split over several (what a rollback's
// replay relies on: state/caches.h), and other heads or sequences never change them.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>

#include "ops/cuda/backend_state.cuh"

namespace sluice::cuda {

using namespace detail;

namespace {

constexpr int kParts = 4;
constexpr int kMaxD = 128;
constexpr uint64_t kPieceBytes = uint64_t(64) << 20;  // device room per input array: rows are run in pieces

struct KdaArgs {
    const float *q, *k, *v, *g, *beta;  // [rows, heads * D] (beta [rows, heads]), compact on the device
    float* o;                           // [rows, heads * D], or null
    float* S;                           // [heads, D, D]
    int64_t rows, heads, D;
};

template <int RPT>  // rows of S a thread holds: ceil(D / kParts) <= RPT
__global__ void __launch_bounds__(kParts * kMaxD) kda_kernel(KdaArgs a) {
    __shared__ float sk[kMaxD], sq[kMaxD], se[kMaxD], sv[kMaxD];
    __shared__ float mem_part[kParts][kMaxD], o_part[kParts][kMaxD];
    __shared__ float sbeta;
    const int D = int(a.D), b = threadIdx.x % D, p = threadIdx.x / D;
    const int64_t h = blockIdx.x, width = a.heads * a.D;
    float* S = a.S + h * a.D * a.D;
    float s[RPT];
#pragma unroll
    for (int i = 0; i < RPT; ++i) {
        const int r = p + kParts * i;
        s[i] = r < D ? S[int64_t(r) * D + b] : 0.0f;
    }
    for (int64_t t = 0; t < a.rows; ++t) {
        const int64_t at = t * width + h * a.D;
        if (p == 0) {
            sk[b] = a.k[at + b];
            sq[b] = a.q[at + b];
            se[b] = expf(a.g[at + b]);
            sv[b] = a.v[at + b];
            if (b == 0) sbeta = a.beta[t * a.heads + h];
        }
        __syncthreads();
        float m = 0.0f;
#pragma unroll
        for (int i = 0; i < RPT; ++i) {
            const int r = p + kParts * i;
            if (r < D) {
                s[i] *= se[r];
                m = fmaf(s[i], sk[r], m);
            }
        }
        mem_part[p][b] = m;
        __syncthreads();
        const float mem = ((mem_part[0][b] + mem_part[1][b]) + mem_part[2][b]) + mem_part[3][b];
        const float delta = (sv[b] - mem) * sbeta;
        float o = 0.0f;
#pragma unroll
        for (int i = 0; i < RPT; ++i) {
            const int r = p + kParts * i;
            if (r < D) {
                s[i] = fmaf(sk[r], delta, s[i]);
                o = fmaf(s[i], sq[r], o);
            }
        }
        o_part[p][b] = o;
        __syncthreads();
        if (p == 0 && a.o) a.o[at + b] = ((o_part[0][b] + o_part[1][b]) + o_part[2][b]) + o_part[3][b];
        // the next token's loads (part 0) write sk..sv, which no thread reads again before the next barrier
    }
#pragma unroll
    for (int i = 0; i < RPT; ++i) {
        const int r = p + kParts * i;
        if (r < D) S[int64_t(r) * D + b] = s[i];
    }
}

void launch(const KdaArgs& a, cudaStream_t st) {
    const int rpt = int((a.D + kParts - 1) / kParts);
    const dim3 grid(unsigned(a.heads)), block(unsigned(kParts * a.D));
    if (rpt <= 4)
        kda_kernel<4><<<grid, block, 0, st>>>(a);
    else if (rpt <= 8)
        kda_kernel<8><<<grid, block, 0, st>>>(a);
    else if (rpt <= 16)
        kda_kernel<16><<<grid, block, 0, st>>>(a);
    else
        kda_kernel<32><<<grid, block, 0, st>>>(a);
    CK(cudaGetLastError());
}

}  // namespace

bool kda_supports(int64_t D) { return D >= 1 && D <= kMaxD; }

void kda_recurrent(const float* q, const float* k, const float* v, const float* g, const float* beta, float* o,
                   int64_t stride, int64_t beta_stride, int64_t heads, int64_t T, int64_t D, float* S) {
    SLUICE_CHECK(kda_supports(D), "CUDA KDA: head size ", D, " above the kernel's ", kMaxD);
    SLUICE_CHECK(heads > 0 && stride >= heads * D && beta_stride >= heads, "CUDA KDA: ", heads, " heads of ", D,
                 " in rows of ", stride, " (beta rows of ", beta_stride, ")");
    if (T <= 0) return;
    auto& b = backend();
    std::lock_guard lock(b.mu);
    const auto t_start = std::chrono::steady_clock::now();
    const cudaStream_t st = b.stream();
    const uint64_t row_bytes = uint64_t(heads * D) * 4, beta_row_bytes = uint64_t(heads) * 4;
    const int64_t rows_per_piece = std::max<int64_t>(1, std::min<int64_t>(T, int64_t(kPieceBytes / row_bytes)));
    const uint64_t arr = align_up(uint64_t(rows_per_piece) * row_bytes, 256);
    const uint64_t beta_bytes = align_up(uint64_t(rows_per_piece) * beta_row_bytes, 256);
    const uint64_t state_bytes = uint64_t(heads * D * D) * 4;
    auto* base = static_cast<uint8_t*>(b.grow(b.kda_, 5 * arr + beta_bytes + state_bytes, "KDA's rows and state"));
    float* dq = reinterpret_cast<float*>(base);
    float* dk = reinterpret_cast<float*>(base + arr);
    float* dv = reinterpret_cast<float*>(base + 2 * arr);
    float* dg = reinterpret_cast<float*>(base + 3 * arr);
    float* dout = reinterpret_cast<float*>(base + 4 * arr);
    float* dbeta = reinterpret_cast<float*>(base + 5 * arr);
    float* dS = reinterpret_cast<float*>(base + 5 * arr + beta_bytes);
    CK(cudaMemcpyAsync(dS, S, state_bytes, cudaMemcpyHostToDevice, st));
    const uint64_t pitch = uint64_t(stride) * 4;
    for (int64_t t0 = 0; t0 < T; t0 += rows_per_piece) {
        const int64_t cnt = std::min(rows_per_piece, T - t0);
        auto up = [&](float* dst, const float* src) {
            CK(cudaMemcpy2DAsync(dst, row_bytes, src + t0 * stride, pitch, row_bytes, size_t(cnt),
                                 cudaMemcpyHostToDevice, st));
        };
        up(dq, q);
        up(dk, k);
        up(dv, v);
        up(dg, g);
        CK(cudaMemcpy2DAsync(dbeta, beta_row_bytes, beta + t0 * beta_stride, uint64_t(beta_stride) * 4, beta_row_bytes,
                             size_t(cnt), cudaMemcpyHostToDevice, st));
        launch(KdaArgs{dq, dk, dv, dg, dbeta, o ? dout : nullptr, dS, cnt, heads, D}, st);
        if (o)
            CK(cudaMemcpy2DAsync(o + t0 * stride, pitch, dout, row_bytes, row_bytes, size_t(cnt),
                                 cudaMemcpyDeviceToHost, st));
        b.stats.h2d_bytes += 4 * uint64_t(cnt) * row_bytes + uint64_t(cnt) * beta_row_bytes;
        if (o) b.stats.d2h_bytes += uint64_t(cnt) * row_bytes;
    }
    CK(cudaMemcpyAsync(S, dS, state_bytes, cudaMemcpyDeviceToHost, st));
    CK(cudaStreamSynchronize(st));
    b.stats.h2d_bytes += state_bytes;
    b.stats.d2h_bytes += state_bytes;
    b.stats.kda_calls++;
    b.stats.kda_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start).count();
}

}  // namespace sluice::cuda
