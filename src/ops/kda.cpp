// The gated delta rule of Kimi Delta Attention for one head, in its two evaluation forms (see ops/kda.h).
#include "ops/kda.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/cuda/backend.h"
#include "ops/exec_context.h"
#include "ops/ops.h"

namespace sluice {

namespace {
// Each thread's buffers of the two forms, grown to the head size (and chunk) once: a pass allocates nothing here
// after its first calls.
struct KdaScratch {
    std::vector<float> mem, G, A, Aqk, U, W, vnew, tmp;
};
thread_local KdaScratch t_kda;
}  // namespace

void kda_recurrent(const KdaHeadIo& io, int64_t T, int64_t D, float* S) {
    std::vector<float>& mem = t_kda.mem;
    mem.assign(static_cast<size_t>(D), 0.0f);
    for (int64_t t = 0; t < T; ++t) {
        const float* q = io.q + t * io.stride;
        const float* k = io.k + t * io.stride;
        const float* v = io.v + t * io.stride;
        const float* g = io.g + t * io.stride;
        const float beta = io.beta[t * io.beta_stride];
        float* o = io.o + t * io.stride;
        // S <- diag(exp g) S ; mem = S^T k
        std::fill(mem.begin(), mem.end(), 0.0f);
        for (int64_t a = 0; a < D; ++a) {
            const float e = std::exp(g[a]);
            float* row = S + a * D;
            for (int64_t b = 0; b < D; ++b) {
                row[b] *= e;
                mem[size_t(b)] += row[b] * k[a];
            }
        }
        // delta = beta (v - mem) ; S += k delta^T ; o = S^T q
        for (int64_t b = 0; b < D; ++b) mem[size_t(b)] = (v[b] - mem[size_t(b)]) * beta;
        std::fill(o, o + D, 0.0f);
        for (int64_t a = 0; a < D; ++a) {
            float* row = S + a * D;
            for (int64_t b = 0; b < D; ++b) {
                row[b] += k[a] * mem[size_t(b)];
                o[b] += row[b] * q[a];
            }
        }
    }
}

void kda_chunked(const KdaHeadIo& io, int64_t T, int64_t D, int64_t chunk, float* S) {
    SLUICE_ASSERT(chunk > 0, "chunk size");
    KdaScratch& buf = t_kda;
    std::vector<float>&G = buf.G, &A = buf.A, &Aqk = buf.Aqk, &U = buf.U, &W = buf.W, &vnew = buf.vnew, &tmp = buf.tmp;
    for (int64_t t0 = 0; t0 < T; t0 += chunk) {
        const int64_t c = std::min(chunk, T - t0);
        auto q = [&](int64_t i, int64_t d) { return io.q[(t0 + i) * io.stride + d]; };
        auto k = [&](int64_t i, int64_t d) { return io.k[(t0 + i) * io.stride + d]; };
        auto v = [&](int64_t i, int64_t d) { return io.v[(t0 + i) * io.stride + d]; };
        auto beta = [&](int64_t i) { return io.beta[(t0 + i) * io.beta_stride]; };
        // cumulative log-decay within the chunk
        G.assign(size_t(c * D), 0.0f);
        for (int64_t i = 0; i < c; ++i)
            for (int64_t d = 0; d < D; ++d)
                G[size_t(i * D + d)] = (i ? G[size_t((i - 1) * D + d)] : 0.0f) + io.g[(t0 + i) * io.stride + d];
        auto gdiff = [&](int64_t i, int64_t j, int64_t d) { return std::exp(G[size_t(i * D + d)] - G[size_t(j * D + d)]); };
        // A[i][j] = -beta_i sum_d k_i k_j exp(G_i - G_j), j < i; then (I + A)^-1 by forward substitution
        A.assign(size_t(c * c), 0.0f);
        Aqk.assign(size_t(c * c), 0.0f);
        for (int64_t i = 0; i < c; ++i)
            for (int64_t j = 0; j <= i; ++j) {
                float s = 0, sq = 0;
                for (int64_t d = 0; d < D; ++d) {
                    const float e = gdiff(i, j, d);
                    s += k(i, d) * beta(i) * k(j, d) * e;
                    sq += q(i, d) * k(j, d) * e;
                }
                if (j < i) A[size_t(i * c + j)] = -s;
                Aqk[size_t(i * c + j)] = sq;
            }
        tmp.resize(size_t(c));
        for (int64_t i = 1; i < c; ++i) {
            std::copy_n(A.data() + i * c, i, tmp.data());
            for (int64_t j = 0; j < i; ++j) {
                float s = tmp[size_t(j)];
                for (int64_t m = j + 1; m < i; ++m) s += tmp[size_t(m)] * A[size_t(m * c + j)];
                A[size_t(i * c + j)] = s;
            }
        }
        for (int64_t i = 0; i < c; ++i) A[size_t(i * c + i)] = 1.0f;
        // U = T (beta v), W = T (beta k exp(G)); vnew = U - W S
        U.assign(size_t(c * D), 0.0f);
        W.assign(size_t(c * D), 0.0f);
        for (int64_t i = 0; i < c; ++i)
            for (int64_t j = 0; j <= i; ++j) {
                const float a = A[size_t(i * c + j)];
                for (int64_t d = 0; d < D; ++d) {
                    U[size_t(i * D + d)] += a * (v(j, d) * beta(j));
                    W[size_t(i * D + d)] += a * (k(j, d) * beta(j) * std::exp(G[size_t(j * D + d)]));
                }
            }
        vnew.assign(size_t(c * D), 0.0f);
        for (int64_t i = 0; i < c; ++i) {
            float* vn = vnew.data() + i * D;
            float* o = io.o + (t0 + i) * io.stride;
            std::fill(o, o + D, 0.0f);
            for (int64_t a = 0; a < D; ++a) {
                const float w = W[size_t(i * D + a)];
                const float qa = q(i, a) * std::exp(G[size_t(i * D + a)]);
                const float* row = S + a * D;
                for (int64_t b = 0; b < D; ++b) {
                    vn[b] += w * row[b];
                    o[b] += qa * row[b];
                }
            }
            for (int64_t b = 0; b < D; ++b) vn[b] = U[size_t(i * D + b)] - vn[b];
        }
        for (int64_t i = 0; i < c; ++i) {
            float* o = io.o + (t0 + i) * io.stride;
            for (int64_t j = 0; j <= i; ++j) {
                const float a = Aqk[size_t(i * c + j)];
                const float* vn = vnew.data() + j * D;
                for (int64_t b = 0; b < D; ++b) o[b] += a * vn[b];
            }
        }
        // S <- diag(exp G_last) S + sum_j (k_j exp(G_last - G_j)) vnew_j^T
        const int64_t l = c - 1;
        for (int64_t a = 0; a < D; ++a) {
            float* row = S + a * D;
            const float e = std::exp(G[size_t(l * D + a)]);
            for (int64_t b = 0; b < D; ++b) row[b] *= e;
            for (int64_t j = 0; j < c; ++j) {
                const float kj = k(j, a) * gdiff(l, j, a);
                const float* vn = vnew.data() + j * D;
                for (int64_t b = 0; b < D; ++b) row[b] += kj * vn[b];
            }
        }
    }
}

}  // namespace sluice

namespace sluice::ops {

void kda_recurrent_heads(const KdaHeadIo& io, int64_t heads, int64_t T, int64_t D, float* S, ExecContext& ctx) {
    kda_recurrent_heads(io, heads, T, D, S, ctx.backend(), &ctx.pool());
}

void kda_recurrent_heads(const KdaHeadIo& io, int64_t heads, int64_t T, int64_t D, float* S, Backend backend,
                         ThreadPool* pool) {
    if (backend == Backend::Cuda && cuda::kda_supports(D) && T >= kKdaCudaMinRows) {
        // the decays with this file's std::exp, as kda_recurrent takes them: the card's rows get the CPU's bits. In
        // pieces of about kDecayBytes, so the buffer stays small (a sequence's rows give the same bits split or not)
        constexpr int64_t kDecayBytes = int64_t(16) << 20;
        const int64_t W = heads * D, piece = std::max(kKdaCudaMinRows, kDecayBytes / (4 * W));
        static thread_local std::vector<float> decay;
        decay.resize(size_t(std::min(T, piece) * W));
        float* dst = decay.data();  // the pool's threads have their own (empty) thread_local vectors
        for (int64_t t0 = 0; t0 < T; t0 += piece) {
            const int64_t cnt = std::min(piece, T - t0);
            auto fill = [&](int64_t r0, int64_t r1) {
                for (int64_t r = r0; r < r1; ++r) {
                    const float* g = io.g + (t0 + r) * io.stride;
                    for (int64_t c = 0; c < W; ++c) dst[r * W + c] = std::exp(g[c]);
                }
            };
            if (pool)
                pool->parallel_for(cnt, fill);
            else
                fill(0, cnt);
            const int64_t a = t0 * io.stride;
            cuda::kda_recurrent(io.q + a, io.k + a, io.v + a, dst, W, io.beta + t0 * io.beta_stride,
                                io.o ? io.o + a : nullptr, io.stride, io.beta_stride, heads, cnt, D, S);
        }
        return;
    }
    std::vector<float> scratch;  // the output a replay discards
    if (!io.o) scratch.resize(size_t(T * io.stride));
    auto run = [&](int64_t h0, int64_t h1) {
        for (int64_t h = h0; h < h1; ++h) {
            KdaHeadIo one{io.q + h * D, io.k + h * D, io.v + h * D, io.g + h * D, io.beta + h,
                          io.o ? io.o + h * D : scratch.data() + h * D, io.stride, io.beta_stride};
            kda_recurrent(one, T, D, S + h * D * D);
        }
    };
    if (pool)
        pool->parallel_for(heads, run);
    else
        run(0, heads);
}

}  // namespace sluice::ops
