// The op harness's checks of the recurrent-attention block's ops and the elementwise ops (tests/ops/op_harness.cpp
// runs them): KDA's delta rule, its short convolution, q/k normalisation, decay gate and output gate, the residual
// add, bias add, sigmoid, sigmoid gate and probe sigmoid (sigmoid_dot), and K3's attention residuals, each against
// its ops::ref twin over odd and real shapes (1 to 4096 rows), with fresh random inputs, NaN-poisoned outputs (every
// element must be written), and a row's bits the same alone as in a batch (the convolution, whose rows carry taps: the
// same in several calls as in one).
#include <algorithm>
#include <cmath>
#include <functional>

#include "core/error.h"
#include "harness_util.h"
#include "ops/attn_res.h"
#include "ops/elementwise.h"
#include "ops/kda.h"
#include "ops/kda_ops.h"
#include "ops/ops.h"

using namespace sluice;

namespace {

// |got - want| <= rel * |want| + abs at every index of `at`, and got finite; "" or the first mismatch
std::string compare(const std::vector<float>& got, const std::vector<float>& want, double rel, double abs,
                    const std::function<bool(size_t)>& at = nullptr) {
    for (size_t i = 0; i < got.size(); ++i) {
        if (at && !at(i)) continue;
        if (!std::isfinite(got[i]) || !(std::fabs(double(got[i]) - want[i]) <= rel * std::fabs(double(want[i])) + abs))
            return cat("element ", i, ": got ", got[i], ", want ", want[i]);
    }
    return "";
}

// A row-wise op's row r alone (its inputs copied to a one-row call) gives the bits it has in the whole call.
// run(first_row, rows, out) runs the op on rows [first_row, first_row + rows) and writes `width` floats a row.
bool rows_alone_match(int64_t n, int64_t width, const std::vector<float>& whole,
                      const std::function<void(int64_t, int64_t, float*)>& run) {
    std::vector<float> one(static_cast<size_t>(width));
    for (int64_t r : {int64_t(0), n / 2, n - 1}) {
        std::fill(one.begin(), one.end(), std::nanf(""));
        run(r, 1, one.data());
        if (!same_bits(one.data(), whole.data() + r * width, width)) return false;
    }
    return true;
}

}  // namespace

// ---- KDA's gated delta rule (recurrent and chunked forms) against its float64 twin ----

// `heads` heads side by side in rows of `stride` (the block interleaves q|k|v), q and k L2-normalised, decays mostly
// slow. The recurrent form runs through `recurrent` (ops::kda_recurrent_heads in a context on the backend under
// test); with `like_cpu` its state and outputs must have the bits of the CPU's per-head loop (kda_recurrent). The
// chunked form (CPU only) per head when `chunked_too`.
void check_kda(const char* name, const KdaFn& recurrent, bool chunked_too, bool like_cpu, std::mt19937& rng) {
    struct K {
        int64_t T, D, heads, chunk, stride;
        float max_decay;
    };
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_real_distribution<float> u01(0.0f, 1.0f);
    for (const K& c : {K{300, 32, 1, 64, 32, 0.5f}, K{200, 128, 3, 64, 3 * 128 + 8, 0.3f}, K{257, 16, 3, 64, 48, 5.0f},
                       K{1, 64, 2, 64, 128, 1.0f}, K{70, 128, 1, 16, 128, 2.0f}, K{33, 40, 2, 16, 81, 1.0f},
                       K{2100, 128, 4, 64, 3 * 512, 0.2f}, K{100, 64, 5, 16, 3 * 320, 0.5f}}) {
        if (c.T * c.heads * c.D * c.D > g_max_work) continue;
        const int64_t H = c.heads, D = c.D;
        std::vector<float> q(static_cast<size_t>(c.T * c.stride)), k(q.size()), v(q.size()), g(q.size()),
            beta(static_cast<size_t>(c.T * H));
        for (int64_t t = 0; t < c.T; ++t)
            for (int64_t h = 0; h < H; ++h) {
                double nq = 0, nk = 0;
                for (int64_t d = 0; d < D; ++d) {
                    const size_t i = size_t(t * c.stride + h * D + d);
                    q[i] = nd(rng), k[i] = nd(rng), v[i] = nd(rng);
                    g[i] = -c.max_decay * std::pow(u01(rng), 3.0f);
                    nq += double(q[i]) * q[i], nk += double(k[i]) * k[i];
                }
                for (int64_t d = 0; d < D; ++d) {
                    const size_t i = size_t(t * c.stride + h * D + d);
                    q[i] = float(q[i] / std::sqrt(nq) / std::sqrt(double(D)));
                    k[i] = float(k[i] / std::sqrt(nk));
                }
                beta[size_t(t * H + h)] = 0.05f + 0.9f * u01(rng);
            }
        std::vector<float> S0 = random_vec(H * D * D, rng, 0.3f);  // a state left by earlier rows
        std::vector<double> S64(S0.begin(), S0.end()), o64(static_cast<size_t>(c.T * H * D));
        const KdaHeadIo io{q.data(), k.data(), v.data(), g.data(), beta.data(), nullptr, c.stride, H};
        for (int64_t h = 0; h < H; ++h) {
            std::vector<double> oh(static_cast<size_t>(c.T * D));
            const KdaHeadIo one{io.q + h * D, io.k + h * D, io.v + h * D, io.g + h * D, io.beta + h, nullptr, c.stride, H};
            ops::ref::kda_delta_rule(one, c.T, D, S64.data() + h * D * D, oh.data());
            for (int64_t t = 0; t < c.T; ++t)
                std::copy_n(oh.data() + t * D, D, o64.data() + (t * H + h) * D);
        }
        auto rel = [&](const std::vector<float>& o, const std::vector<float>& S) {
            double num = 0, den = 0, snum = 0, sden = 0;
            for (int64_t t = 0; t < c.T; ++t)
                for (int64_t d = 0; d < H * D; ++d) {
                    const double got = o[size_t(t * c.stride + d)], want = o64[size_t(t * H * D + d)];
                    num = std::max(num, std::isfinite(got) ? std::fabs(got - want) : INFINITY);
                    den = std::max(den, std::fabs(want));
                }
            for (size_t i = 0; i < S.size(); ++i) {
                snum = std::max(snum, std::isfinite(S[i]) ? std::fabs(double(S[i]) - S64[i]) : INFINITY);
                sden = std::max(sden, std::fabs(S64[i]));
            }
            return std::max(num / den, snum / sden);
        };
        const std::string what = cat(name, " kda T=", c.T, " D=", D, " heads ", H, " chunk ", c.chunk, " stride ",
                                     c.stride);
        for (bool chunked : {false, true}) {
            if (chunked && !chunked_too) continue;
            std::vector<float> o(q.size(), std::nanf("")), S = S0;
            KdaHeadIo w = io;
            w.o = o.data();
            if (chunked) {
                for (int64_t h = 0; h < H; ++h) {
                    KdaHeadIo one{io.q + h * D, io.k + h * D, io.v + h * D, io.g + h * D, io.beta + h, o.data() + h * D,
                                  c.stride, H};
                    kda_chunked(one, c.T, D, c.chunk, S.data() + h * D * D);
                }
            } else {
                recurrent(w, H, c.T, D, S.data());
            }
            const double e = rel(o, S);
            report(e <= 1e-5, cat(what, chunked ? " chunked" : " recurrent", " vs reference: relative error ", e));
            if (!chunked && like_cpu) {  // the CPU loop, head by head: the same bits
                std::vector<float> oc(q.size(), std::nanf("")), Sc = S0;
                for (int64_t h = 0; h < H; ++h) {
                    KdaHeadIo one{io.q + h * D, io.k + h * D, io.v + h * D, io.g + h * D, io.beta + h,
                                  oc.data() + h * D, c.stride, H};
                    kda_recurrent(one, c.T, D, Sc.data() + h * D * D);
                }
                bool same = same_bits(Sc.data(), S.data(), H * D * D);
                for (int64_t t = 0; t < c.T; ++t)
                    same = same && same_bits(oc.data() + t * c.stride, o.data() + t * c.stride, H * D);
                report(same, what + ": other bits than the CPU's loop");
            }
            if (!chunked && c.T > 1) {
                // rows in two calls (what a rollback's replay relies on), and a call without outputs (a replay's):
                // the bits of one call
                std::vector<float> o2(q.size(), std::nanf("")), S2 = S0, S3 = S0;
                const int64_t cut = c.T / 3;
                KdaHeadIo a = io, b = io;
                a.o = o2.data();
                b.q += cut * c.stride, b.k += cut * c.stride, b.v += cut * c.stride, b.g += cut * c.stride;
                b.beta += cut * H, b.o = o2.data() + cut * c.stride;
                recurrent(a, H, cut, D, S2.data());
                recurrent(b, H, c.T - cut, D, S2.data());
                bool same = same_bits(S2.data(), S.data(), H * D * D);
                for (int64_t t = 0; t < c.T; ++t)
                    same = same && same_bits(o2.data() + t * c.stride, o.data() + t * c.stride, H * D);
                report(same, what + ": the recurrent form in two calls gives other bits than in one");
                recurrent(io, H, c.T, D, S3.data());
                report(same_bits(S3.data(), S.data(), H * D * D), what + ": without outputs, other state bits");
            }
        }
    }
}

void check_kda_block_ops(const char* name, ThreadPool& pool, std::mt19937& rng) {
    // the short convolution: channels, kernel, rows, row stride
    struct C {
        int64_t ch, K, rows, ld;
    };
    for (const C& c : {C{1, 1, 1, 1}, C{7, 4, 1, 7}, C{96, 4, 13, 300}, C{130, 3, 300, 130}, C{384, 4, 4096, 384},
                       C{33, 2, 65, 99}}) {
        const auto w = random_vec(c.ch * c.K, rng, 0.5f), raw = random_vec(c.rows * c.ld, rng);
        const auto taps0 = random_vec(c.ch * (c.K - 1), rng);
        std::vector<float> out(raw.size(), std::nanf("")), want(raw.size(), std::nanf(""));
        auto taps = taps0, rtaps = taps0;
        ops::kda_short_conv(w.data(), c.ch, c.K, taps.data(), raw.data(), c.rows, c.ld, out.data(), pool);
        ops::ref::kda_short_conv(w.data(), c.ch, c.K, rtaps.data(), raw.data(), c.rows, c.ld, want.data());
        const std::string what = cat(name, " kda_short_conv channels ", c.ch, " kernel ", c.K, " rows ", c.rows,
                                     " ld ", c.ld);
        std::string why = compare(out, want, 1e-5, 1e-6, [&](size_t i) { return int64_t(i) % c.ld < c.ch; });
        if (why.empty() && !same_bits(taps.data(), rtaps.data(), int64_t(taps.size()))) why = "carried taps differ";
        report(why.empty(), what + " vs reference: " + why);
        // the rows in three calls (the first row alone, then two runs) give the bits of one call
        std::vector<float> split(raw.size(), std::nanf(""));
        auto staps = taps0;
        const int64_t cut = std::max<int64_t>(1, c.rows / 2);
        for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, 1}, {1, cut}, {cut, c.rows}})
            if (r1 > r0)
                ops::kda_short_conv(w.data(), c.ch, c.K, staps.data(), raw.data() + r0 * c.ld, r1 - r0, c.ld,
                                    split.data() + r0 * c.ld, pool);
        bool same = same_bits(staps.data(), taps.data(), int64_t(taps.size()));
        for (int64_t r = 0; r < c.rows; ++r) same = same && same_bits(split.data() + r * c.ld, out.data() + r * c.ld, c.ch);
        report(same, what + ": rows split over calls give other bits than one call");
    }
    // q/k normalisation: rows, heads, dim, row stride, scale
    struct L {
        int64_t rows, heads, dim, ld;
        float scale;
    };
    for (const L& c : {L{1, 1, 1, 1, 1.0f}, L{3, 5, 7, 40, 0.37f}, L{300, 8, 128, 3072, 0.088f},
                       L{4096, 2, 64, 128, 1.0f}, L{17, 32, 128, 4096, 0.125f}}) {
        const auto x0 = random_vec(c.rows * c.ld, rng, 3.0f);
        auto got = x0, want = x0;
        ops::l2_norm_heads(got.data(), c.rows, c.heads, c.dim, c.ld, c.scale, pool);
        ops::ref::l2_norm_heads(want.data(), c.rows, c.heads, c.dim, c.ld, c.scale);
        const std::string what = cat(name, " l2_norm_heads rows ", c.rows, " heads ", c.heads, " dim ", c.dim, " ld ",
                                     c.ld);
        report(compare(got, want, 1e-5, 1e-6 * c.scale).empty(), what + " vs reference: " + compare(got, want, 1e-5, 1e-6 * c.scale));
        report(rows_alone_match(c.rows, c.ld, got, [&](int64_t r0, int64_t m, float* o) {
            std::copy_n(x0.data() + r0 * c.ld, m * c.ld, o);
            ops::l2_norm_heads(o, m, c.heads, c.dim, c.ld, c.scale, pool);
        }), what + ": a row's bits depend on the other rows");
    }
    // the decay gate and the output gate: rows, heads, dim
    struct G {
        int64_t n, heads, dim;
    };
    for (const G& c : {G{1, 1, 1}, G{5, 3, 7}, G{300, 8, 64}, G{4096, 2, 32}, G{33, 32, 128}}) {
        const int64_t P = c.heads * c.dim;
        for (float lb : {0.0f, -5.0f}) {
            auto f = random_vec(c.n * P, rng, 4.0f);
            f[0] = 30.0f;  // past softplus's threshold
            const auto A_log = random_vec(c.heads, rng, 0.5f), dt = random_vec(P, rng, 0.5f);
            std::vector<float> g(f.size(), std::nanf("")), want(f.size());
            ops::kda_decay_gate(f.data(), A_log.data(), dt.data(), c.n, c.heads, c.dim, lb, g.data(), pool);
            ops::ref::kda_decay_gate(f.data(), A_log.data(), dt.data(), c.n, c.heads, c.dim, lb, want.data());
            const std::string what = cat(name, " kda_decay_gate lower bound ", lb, " n=", c.n, " heads ", c.heads,
                                         " dim ", c.dim);
            const std::string why = compare(g, want, 1e-5, 1e-5);
            report(why.empty(), what + " vs reference: " + why);
            report(rows_alone_match(c.n, P, g, [&](int64_t r0, int64_t m, float* o) {
                ops::kda_decay_gate(f.data() + r0 * P, A_log.data(), dt.data(), m, c.heads, c.dim, lb, o, pool);
            }), what + ": a row's bits depend on the other rows");
        }
        const auto o0 = random_vec(c.n * P, rng, 2.0f), gate = random_vec(c.n * P, rng, 2.0f);
        const auto nw = random_vec(c.dim, rng, 0.5f);
        std::vector<float> o(o0.size(), std::nanf("")), want = o0;
        std::copy(o0.begin(), o0.end(), o.begin());
        ops::kda_output_gate(gate.data(), nw.data(), c.n, c.heads, c.dim, 1e-5f, o.data(), pool);
        ops::ref::kda_output_gate(gate.data(), nw.data(), c.n, c.heads, c.dim, 1e-5f, want.data());
        const std::string what = cat(name, " kda_output_gate n=", c.n, " heads ", c.heads, " dim ", c.dim);
        const std::string why = compare(o, want, 1e-5, 1e-30);
        report(why.empty(), what + " vs reference: " + why);
        report(rows_alone_match(c.n, P, o, [&](int64_t r0, int64_t m, float* out) {
            std::copy_n(o0.data() + r0 * P, m * P, out);
            ops::kda_output_gate(gate.data() + r0 * P, nw.data(), m, c.heads, c.dim, 1e-5f, out, pool);
        }), what + ": a row's bits depend on the other rows");
    }
}

void check_elementwise(const char* name, std::mt19937& rng) {
    for (int64_t n : {1, 2, 7, 300, 4096})
        for (int64_t w : {1, 13, 1024}) {
            const auto a = random_vec(n * w, rng), b = random_vec(n * w, rng, 3.0f), bias = random_vec(w, rng);
            const std::string shape = cat(" rows ", n, " width ", w);
            // add: exact (a float sum rounds once), also in place
            std::vector<float> y(a.size(), std::nanf("")), want(a.size());
            ops::add(a.data(), b.data(), n * w, y.data());
            ops::ref::add(a.data(), b.data(), n * w, want.data());
            auto inplace = a;
            ops::add(inplace.data(), b.data(), n * w, inplace.data());
            report(compare(y, want, 0, 0).empty() && same_bits(inplace.data(), y.data(), n * w),
                   cat(name, " add", shape, " vs reference: ", compare(y, want, 0, 0)));
            report(rows_alone_match(n, w, y, [&](int64_t r0, int64_t m, float* o) {
                ops::add(a.data() + r0 * w, b.data() + r0 * w, m * w, o);
            }), cat(name, " add", shape, ": a row's bits depend on the other rows"));
            // add_bias
            auto yb = a, wb = a;
            ops::add_bias(yb.data(), bias.data(), n, w);
            ops::ref::add_bias(wb.data(), bias.data(), n, w);
            report(compare(yb, wb, 0, 0).empty(), cat(name, " add_bias", shape, " vs reference: ", compare(yb, wb, 0, 0)));
            report(rows_alone_match(n, w, yb, [&](int64_t r0, int64_t m, float* o) {
                std::copy_n(a.data() + r0 * w, m * w, o);
                ops::add_bias(o, bias.data(), m, w);
            }), cat(name, " add_bias", shape, ": a row's bits depend on the other rows"));
            // sigmoid
            std::vector<float> s(a.size(), std::nanf("")), ws(a.size());
            ops::sigmoid(b.data(), n * w, s.data());
            ops::ref::sigmoid(b.data(), n * w, ws.data());
            report(compare(s, ws, 1e-6, 1e-7).empty(), cat(name, " sigmoid", shape, " vs reference: ", compare(s, ws, 1e-6, 1e-7)));
            report(rows_alone_match(n, w, s, [&](int64_t r0, int64_t m, float* o) {
                ops::sigmoid(b.data() + r0 * w, m * w, o);
            }), cat(name, " sigmoid", shape, ": a row's bits depend on the other rows"));
            // mul_sigmoid: y *= sigmoid(gate), in place
            auto g = a, wg = a;
            ops::mul_sigmoid(b.data(), n * w, g.data());
            ops::ref::mul_sigmoid(b.data(), n * w, wg.data());
            report(compare(g, wg, 1e-6, 1e-7).empty(),
                   cat(name, " mul_sigmoid", shape, " vs reference: ", compare(g, wg, 1e-6, 1e-7)));
            report(rows_alone_match(n, w, g, [&](int64_t r0, int64_t m, float* o) {
                std::copy_n(a.data() + r0 * w, m * w, o);
                ops::mul_sigmoid(b.data() + r0 * w, m * w, o);
            }), cat(name, " mul_sigmoid", shape, ": a row's bits depend on the other rows"));
        }
    // sigmoid_dot: a probe over two inputs side by side (DSpark's confidence), near 0.5 and saturated both ways
    for (int64_t n1 : {1, 7, 1024})
        for (int64_t n2 : {0, 3, 256})
            for (float scale : {0.05f, 8.0f}) {
                const auto w = random_vec(n1 + n2, rng, scale), x1 = random_vec(n1, rng), x2 = random_vec(n2, rng);
                for (float bias : {0.0f, -30.0f, 30.0f}) {
                    const float got = ops::sigmoid_dot(w.data(), bias, x1.data(), n1, x2.data(), n2);
                    const float want = ops::ref::sigmoid_dot(w.data(), bias, x1.data(), n1, x2.data(), n2);
                    report(std::abs(got - want) <= 1e-6f * std::abs(want) + 1e-12f,
                           cat(name, " sigmoid_dot n1 ", n1, " n2 ", n2, " scale ", scale, " bias ", bias, ": ", got,
                               " vs reference ", want));
                }
            }
}

// Block Attention Residuals over J candidates: against the double twin, every output written (NaN-poisoned), a
// row's bits the same alone as in the whole call (the pool splits rows), and candidates of very different sizes
// (the softmax must pick the large one, which an unnormalised logit would not show).
void check_attn_res(const char* name, ThreadPool& pool, std::mt19937& rng) {
    struct Case { int64_t n, d, J; };
    for (const Case c : {Case{1, 13, 1}, Case{2, 64, 2}, Case{7, 256, 5}, Case{300, 96, 13}, Case{4096, 16, 3},
                         Case{33, 1024, 20}}) {
        std::vector<std::vector<float>> cand;
        for (int64_t j = 0; j < c.J; ++j) cand.push_back(random_vec(c.n * c.d, rng, j == 1 ? 40.0f : 1.0f));
        std::vector<const float*> ptr;
        for (const auto& v : cand) ptr.push_back(v.data());
        const auto norm = random_vec(c.d, rng, 2.0f), proj = random_vec(c.d, rng, 0.5f);
        std::vector<float> out(size_t(c.n * c.d), std::nanf("")), want(out.size());
        ops::attn_res(ptr.data(), c.J, norm.data(), proj.data(), c.n, c.d, 1e-6f, out.data(), pool);
        ops::ref::attn_res(ptr.data(), c.J, norm.data(), proj.data(), c.n, c.d, 1e-6f, want.data());
        const std::string what = cat(name, " attn_res n=", c.n, " d=", c.d, " J=", c.J);
        // f32 sums over d: an output near zero among candidates of size ~40 carries their rounding, hence the
        // absolute part relative to the largest candidate element
        float big = 0;
        for (const auto& v : cand)
            for (float e : v) big = std::max(big, std::fabs(e));
        const std::string why = compare(out, want, 1e-4, 2e-5 * big);
        report(why.empty(), what + " vs reference: " + why);
        report(rows_alone_match(c.n, c.d, out, [&](int64_t r0, int64_t m, float* o) {
            std::vector<const float*> rp;
            for (const auto& v : cand) rp.push_back(v.data() + r0 * c.d);
            ops::attn_res(rp.data(), c.J, norm.data(), proj.data(), m, c.d, 1e-6f, o, pool);
        }), what + ": a row's bits depend on the other rows");
    }
}
