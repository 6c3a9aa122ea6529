#include "models/blocks/kda.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "ops/ops.h"

namespace sluice {

namespace {
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float silu(float x) { return x / (1.0f + std::exp(-x)); }
}  // namespace

void KdaState::reset(const KdaConfig& c) {
    conv.assign(size_t(3 * c.proj_dim() * (c.conv_kernel - 1)), 0.0f);
    state.assign(size_t(c.n_heads * c.head_dim * c.head_dim), 0.0f);
}

void kda_recurrent(const KdaHeadIo& io, int64_t T, int64_t D, float* S) {
    std::vector<float> mem(static_cast<size_t>(D), 0.0f);
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
    std::vector<float> G, A, Aqk, U, W, vnew, tmp;
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

namespace {

// Causal depthwise conv over one sequence's rows with its carried taps, then SiLU. raw/out: rows at stride `ld`.
void short_conv(const std::vector<float>& weight, int64_t P, int64_t K, float* taps, const float* raw, int64_t m,
                int64_t ld, float* out) {
    std::vector<float> win(static_cast<size_t>(K));
    for (int64_t ch = 0; ch < P; ++ch) {
        float* tp = taps + ch * (K - 1);
        const float* wc = weight.data() + ch * K;
        for (int64_t j = 0; j < m; ++j) {
            std::copy_n(tp, K - 1, win.data());
            win[size_t(K - 1)] = raw[j * ld + ch];
            float s = 0;
            for (int64_t i = 0; i < K; ++i) s += wc[i] * win[size_t(i)];
            out[j * ld + ch] = silu(s);
            std::copy_n(win.data() + 1, K - 1, tp);
        }
    }
}

void l2_normalise(float* x, int64_t D, float scale) {
    float ss = 0;
    for (int64_t d = 0; d < D; ++d) ss += x[d] * x[d];
    const float inv = 1.0f / std::sqrt(ss + 1e-6f);
    for (int64_t d = 0; d < D; ++d) x[d] = x[d] * inv * scale;
}

}  // namespace

void kda_forward(const KdaConfig& c, const KdaWeights& w, const float* x, int64_t n, const std::vector<KdaSeqRows>& seqs,
                 float* out, ThreadPool& pool, KdaForm form) {
    const int64_t H = c.n_heads, D = c.head_dim, P = c.proj_dim(), K = c.conv_kernel;
    const size_t nP = size_t(n * P);
    std::vector<float> raw(3 * nP), qkv(3 * nP), f(nP), g(nP), gate(nP), beta(size_t(n * H)), o(nP);
    for (int p = 0; p < 3; ++p) ops::matmul(p == 0 ? w.q_proj : p == 1 ? w.k_proj : w.v_proj, x, n, raw.data() + p * nP, pool);
    {
        std::vector<float> fa(size_t(n * D));
        ops::matmul(w.f_a_proj, x, n, fa.data(), pool);
        ops::matmul(w.f_b_proj, fa.data(), n, f.data(), pool);
        if (c.full_rank_gate) {
            ops::matmul(w.g_proj, x, n, gate.data(), pool);
        } else {
            ops::matmul(w.g_a_proj, x, n, fa.data(), pool);
            ops::matmul(w.g_b_proj, fa.data(), n, gate.data(), pool);
        }
        ops::matmul(w.b_proj, x, n, beta.data(), pool);
    }
    for (auto& b : beta) b = sigmoid(b);
    for (int64_t i = 0; i < n; ++i)
        for (int64_t h = 0; h < H; ++h) {
            const float a = std::exp(w.A_log[size_t(h)]);
            for (int64_t d = 0; d < D; ++d) {
                const size_t j = size_t(i * P + h * D + d);
                const float u = f[j] + w.dt_bias[size_t(h * D + d)];
                if (c.gate_lower_bound < 0) {
                    g[j] = c.gate_lower_bound * sigmoid(a * u);
                } else {
                    const float sp = u > 20.0f ? u : std::log(1.0f + std::exp(u));
                    g[j] = -a * sp;
                }
            }
        }

    const float scale = 1.0f / std::sqrt(float(D));
    for (const auto& s : seqs) {
        const int64_t m = int64_t(s.rows.size());
        SLUICE_ASSERT(s.state && !s.state->state.empty(), "KDA state not initialised");
        // gather this sequence's rows: [m, 3P] raw, then conv, normalise
        std::vector<float> sraw(size_t(m * 3 * P)), sq(size_t(m * 3 * P)), sg(size_t(m * P)), sb(size_t(m * H)),
            so(size_t(m * P));
        for (int64_t j = 0; j < m; ++j) {
            const int64_t r = s.rows[size_t(j)];
            for (int p = 0; p < 3; ++p) std::copy_n(raw.data() + p * nP + r * P, P, sraw.data() + j * 3 * P + p * P);
            std::copy_n(g.data() + r * P, P, sg.data() + j * P);
            std::copy_n(beta.data() + r * H, H, sb.data() + j * H);
        }
        for (int p = 0; p < 3; ++p) {
            const auto& cw = p == 0 ? w.q_conv : p == 1 ? w.k_conv : w.v_conv;
            short_conv(cw, P, K, s.state->conv.data() + p * P * (K - 1), sraw.data() + p * P, m, 3 * P, sq.data() + p * P);
        }
        for (int64_t j = 0; j < m; ++j)
            for (int64_t h = 0; h < H; ++h) {
                l2_normalise(sq.data() + j * 3 * P + h * D, D, scale);
                l2_normalise(sq.data() + j * 3 * P + P + h * D, D, 1.0f);
            }
        pool.parallel_for(H, [&](int64_t h0, int64_t h1) {
            // q/k/v interleaved per row ([q|k|v] of width 3P); g and o use stride P: copy g/o into 3P-strided views
            std::vector<float> gh(size_t(m * 3 * P)), oh(size_t(m * 3 * P));
            for (int64_t h = h0; h < h1; ++h) {
                for (int64_t j = 0; j < m; ++j) std::copy_n(sg.data() + j * P + h * D, D, gh.data() + j * 3 * P);
                KdaHeadIo io{sq.data() + h * D, sq.data() + P + h * D, sq.data() + 2 * P + h * D, gh.data(),
                             sb.data() + h, oh.data(), 3 * P, H};
                float* S = s.state->state.data() + h * D * D;
                if (form == KdaForm::Chunked && m > 1)
                    kda_chunked(io, m, D, c.chunk_size, S);
                else
                    kda_recurrent(io, m, D, S);
                for (int64_t j = 0; j < m; ++j) std::copy_n(oh.data() + j * 3 * P, D, so.data() + j * P + h * D);
            }
        });
        for (int64_t j = 0; j < m; ++j) std::copy_n(so.data() + j * P, P, o.data() + s.rows[size_t(j)] * P);
    }

    // gated RMSNorm per head, then o_proj
    for (int64_t i = 0; i < n; ++i)
        for (int64_t h = 0; h < H; ++h) {
            float* oh = o.data() + i * P + h * D;
            ops::rms_norm(oh, w.o_norm.data(), 1, D, c.norm_eps, oh);
            const float* gt = gate.data() + i * P + h * D;
            for (int64_t d = 0; d < D; ++d) oh[d] *= sigmoid(gt[d]);
        }
    ops::matmul(w.o_proj, o.data(), n, out, pool);
}

}  // namespace sluice
