// KDA's gated delta rule on the GPU, recurrent form (ops/kda.h; ops::kda_recurrent_heads dispatches here).
//
// The same bits as the CPU's loop (ops/kda.cpp kda_recurrent): a thread owns one column b of one head's state S
// [D, D] (k-major), all D rows of it in registers for the whole call, and does that loop's arithmetic for its column
// in that loop's order, every product and sum rounded on its own (__fmul_rn/__fadd_rn: nothing fused):
//   S[a, b] *= exp(g[a]); mem += S[a, b] k[a]   (a = 0, 1, ...);  delta = (v[b] - mem) beta;
//   S[a, b] += k[a] delta; o[b] += S[a, b] q[a]  (a = 0, 1, ...).
// exp(g) comes from the host (ops::kda_recurrent_heads computes it with the CPU loop's std::exp), so the GPU and
// the CPU are interchangeable row by row: a sequence's rows give the same bits on either side, in one call or many.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>

#include "ops/cuda/backend_state.cuh"

namespace sluice::cuda {

using namespace detail;

namespace {

constexpr int kMaxD = 128;
constexpr uint64_t kPieceBytes = uint64_t(64) << 20;  // device room per input array: rows are run in pieces

struct KdaArgs {
    const float *q, *k, *v, *e, *beta;  // [rows, heads * D] (e = exp(g); beta [rows, heads]), compact on the device
    float* o;                           // [rows, heads * D], or null
    float* S;                           // [heads, D, D]
    int64_t rows, heads, D;
};

template <int DMAX>  // D <= DMAX: the column's rows in registers (loops unrolled to DMAX, guarded by D)
__global__ void __launch_bounds__(DMAX) kda_kernel(KdaArgs a) {
    __shared__ float sk[DMAX], sq[DMAX], se[DMAX];
    const int D = int(a.D), b = threadIdx.x;
    const int64_t h = blockIdx.x, width = a.heads * a.D;
    float* S = a.S + h * a.D * a.D;
    float s[DMAX];
#pragma unroll
    for (int r = 0; r < DMAX; ++r) s[r] = r < D ? S[int64_t(r) * D + b] : 0.0f;
    for (int64_t t = 0; t < a.rows; ++t) {
        const int64_t at = t * width + h * a.D;
        __syncthreads();  // the previous token's reads of sk, sq, se are done
        sk[b] = a.k[at + b];
        sq[b] = a.q[at + b];
        se[b] = a.e[at + b];
        const float v = a.v[at + b], beta = a.beta[t * a.heads + h];
        __syncthreads();
        float mem = 0.0f;
#pragma unroll
        for (int r = 0; r < DMAX; ++r)
            if (r < D) {
                s[r] = __fmul_rn(s[r], se[r]);
                mem = __fadd_rn(mem, __fmul_rn(s[r], sk[r]));
            }
        const float delta = __fmul_rn(__fsub_rn(v, mem), beta);
        float o = 0.0f;
#pragma unroll
        for (int r = 0; r < DMAX; ++r)
            if (r < D) {
                s[r] = __fadd_rn(s[r], __fmul_rn(sk[r], delta));
                o = __fadd_rn(o, __fmul_rn(s[r], sq[r]));
            }
        if (a.o) a.o[at + b] = o;
    }
#pragma unroll
    for (int r = 0; r < DMAX; ++r)
        if (r < D) S[int64_t(r) * D + b] = s[r];
}

void launch(const KdaArgs& a, cudaStream_t st) {
    const dim3 grid(unsigned(a.heads)), block(unsigned(a.D));
    if (a.D <= 32)
        kda_kernel<32><<<grid, block, 0, st>>>(a);
    else if (a.D <= 64)
        kda_kernel<64><<<grid, block, 0, st>>>(a);
    else
        kda_kernel<128><<<grid, block, 0, st>>>(a);
    CK(cudaGetLastError());
}

}  // namespace

bool kda_supports(int64_t D) { return D >= 1 && D <= kMaxD; }

void kda_recurrent(const float* q, const float* k, const float* v, const float* decay, int64_t decay_stride,
                   const float* beta, float* o, int64_t stride, int64_t beta_stride, int64_t heads, int64_t T, int64_t D,
                   float* S) {
    SLUICE_CHECK(kda_supports(D), "CUDA KDA: head size ", D, " above the kernel's ", kMaxD);
    SLUICE_CHECK(heads > 0 && stride >= heads * D && decay_stride >= heads * D && beta_stride >= heads, "CUDA KDA: ",
                 heads, " heads of ", D, " in rows of ", stride, " (decay rows of ", decay_stride, ", beta rows of ",
                 beta_stride, ")");
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
    float* de = reinterpret_cast<float*>(base + 3 * arr);
    float* dout = reinterpret_cast<float*>(base + 4 * arr);
    float* dbeta = reinterpret_cast<float*>(base + 5 * arr);
    float* dS = reinterpret_cast<float*>(base + 5 * arr + beta_bytes);
    CK(cudaMemcpyAsync(dS, S, state_bytes, cudaMemcpyHostToDevice, st));
    const uint64_t pitch = uint64_t(stride) * 4;
    for (int64_t t0 = 0; t0 < T; t0 += rows_per_piece) {
        const int64_t cnt = std::min(rows_per_piece, T - t0);
        auto up = [&](float* dst, const float* src, int64_t src_stride) {
            CK(cudaMemcpy2DAsync(dst, row_bytes, src + t0 * src_stride, uint64_t(src_stride) * 4, row_bytes,
                                 size_t(cnt), cudaMemcpyHostToDevice, st));
        };
        up(dq, q, stride);
        up(dk, k, stride);
        up(dv, v, stride);
        up(de, decay, decay_stride);
        CK(cudaMemcpy2DAsync(dbeta, beta_row_bytes, beta + t0 * beta_stride, uint64_t(beta_stride) * 4, beta_row_bytes,
                             size_t(cnt), cudaMemcpyHostToDevice, st));
        launch(KdaArgs{dq, dk, dv, de, dbeta, o ? dout : nullptr, dS, cnt, heads, D}, st);
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
