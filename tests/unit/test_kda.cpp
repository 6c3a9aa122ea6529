// Kimi Delta Attention: the recurrent and chunked forms of the delta rule against a naive float64 recurrence, on
// inputs that cross several chunk boundaries; and the whole block (conv state, gates, output norm) run in pieces
// versus in one call.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "models/blocks/kda.h"
#include "ops/exec_context.h"
#include "ops/kda.h"
#include "../support/test_util.h"

using namespace sluice;

namespace {

using test::rel_error;
std::vector<double> to_f64(const std::vector<float>& v) { return {v.begin(), v.end()}; }

struct HeadInputs {
    int64_t T, D;
    std::vector<float> q, k, v, g, beta;
};

HeadInputs make_inputs(int64_t T, int64_t D, float max_decay, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_real_distribution<float> u01(0.0f, 1.0f);
    HeadInputs in{T, D, {}, {}, {}, {}, {}};
    in.q.resize(size_t(T * D));
    in.k.resize(size_t(T * D));
    in.v.resize(size_t(T * D));
    in.g.resize(size_t(T * D));
    in.beta.resize(size_t(T));
    for (int64_t t = 0; t < T; ++t) {
        double nq = 0, nk = 0;
        for (int64_t d = 0; d < D; ++d) {
            in.q[size_t(t * D + d)] = nd(rng);
            in.k[size_t(t * D + d)] = nd(rng);
            in.v[size_t(t * D + d)] = nd(rng);
            // mostly slow decay, some channels fast (as trained gates are)
            in.g[size_t(t * D + d)] = -max_decay * std::pow(u01(rng), 3.0f);
            nq += double(in.q[size_t(t * D + d)]) * in.q[size_t(t * D + d)];
            nk += double(in.k[size_t(t * D + d)]) * in.k[size_t(t * D + d)];
        }
        for (int64_t d = 0; d < D; ++d) {
            in.q[size_t(t * D + d)] = float(in.q[size_t(t * D + d)] / std::sqrt(nq) / std::sqrt(double(D)));
            in.k[size_t(t * D + d)] = float(in.k[size_t(t * D + d)] / std::sqrt(nk));
        }
        in.beta[size_t(t)] = 0.05f + 0.9f * u01(rng);
    }
    return in;
}

// The float64 twin (ops::ref::kda_delta_rule) over a head's inputs.
void naive_f64(const HeadInputs& in, std::vector<double>& o, std::vector<double>& S) {
    o.assign(size_t(in.T * in.D), 0.0);
    ops::ref::kda_delta_rule({in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), nullptr, in.D, 1},
                             in.T, in.D, S.data(), o.data());
}

struct FormCase {
    int64_t T, D, chunk;
    float max_decay;
};

class KdaForms : public ::testing::TestWithParam<FormCase> {};

TEST_P(KdaForms, RecurrentAndChunkedAgreeWithFloat64) {
    const auto p = GetParam();
    HeadInputs in = make_inputs(p.T, p.D, p.max_decay, 1234u + uint32_t(p.T));
    // a non-zero initial state, as after an earlier prefill
    std::vector<double> S64(size_t(p.D * p.D));
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 0.3f);
    for (auto& s : S64) s = nd(rng);
    std::vector<float> S_rec(S64.begin(), S64.end()), S_chk = S_rec;
    std::vector<double> o64;
    naive_f64(in, o64, S64);

    std::vector<float> o_rec(size_t(p.T * p.D)), o_chk(size_t(p.T * p.D));
    kda_recurrent({in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), o_rec.data(), p.D, 1}, p.T,
                  p.D, S_rec.data());
    kda_chunked({in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), o_chk.data(), p.D, 1}, p.T, p.D,
                p.chunk, S_chk.data());

    const double e_rec = rel_error(o_rec, o64), e_chk = rel_error(o_chk, o64);
    const double e_rc = rel_error(o_chk, to_f64(o_rec)), e_state = rel_error(S_chk, to_f64(S_rec));
    std::printf("[ kda      ] T=%lld D=%lld chunk=%lld: rel err recurrent/f64 %.2g, chunked/f64 %.2g, "
                "chunked/recurrent %.2g, state %.2g\n",
                (long long)p.T, (long long)p.D, (long long)p.chunk, e_rec, e_chk, e_rc, e_state);
    EXPECT_LE(e_rec, 1e-5);
    EXPECT_LE(e_chk, 1e-5);
    EXPECT_LE(e_rc, 1e-5);
    EXPECT_LE(e_state, 1e-5);
    EXPECT_LE(rel_error(S_rec, S64), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Long, KdaForms,
                         ::testing::Values(FormCase{300, 32, 64, 0.5f}, FormCase{200, 128, 64, 0.3f},
                                           FormCase{257, 16, 64, 5.0f}, FormCase{100, 24, 16, 1.0f}));

// The whole block over a sequence in several calls equals one call (recurrent: bit for bit; chunked: 1e-5).
TEST(KdaBlock, PiecesEqualWholeAndFormsAgree) {
    KdaConfig c;
    c.hidden_size = 24;
    c.n_heads = 2;
    c.head_dim = 16;
    c.conv_kernel = 4;
    c.chunk_size = 8;
    const int64_t P = c.proj_dim(), hid = c.hidden_size, D = c.head_dim;
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<std::vector<float>> store;
    auto mat = [&](int64_t rows, int64_t cols, float s) {
        store.emplace_back(size_t(rows * cols));
        for (auto& x : store.back()) x = nd(rng) * s;
        Weight w;
        w.rows = rows;
        w.cols = cols;
        w.data = reinterpret_cast<const uint8_t*>(store.back().data());
        return w;
    };
    auto vec = [&](int64_t n, float s, float off) {
        std::vector<float> v(static_cast<size_t>(n));
        for (auto& x : v) x = off + nd(rng) * s;
        return v;
    };
    store.reserve(16);
    KdaWeights w;
    w.q_proj = mat(P, hid, 0.3f);
    w.k_proj = mat(P, hid, 0.3f);
    w.v_proj = mat(P, hid, 0.3f);
    w.q_conv = vec(P * 4, 0.5f, 0.0f);
    w.k_conv = vec(P * 4, 0.5f, 0.0f);
    w.v_conv = vec(P * 4, 0.5f, 0.0f);
    w.f_a_proj = mat(D, hid, 0.3f);
    w.f_b_proj = mat(P, D, 0.3f);
    w.A_log = vec(c.n_heads, 0.5f, 0.0f);
    w.dt_bias = vec(P, 0.5f, -1.0f);
    w.b_proj = mat(c.n_heads, hid, 0.3f);
    w.g_a_proj = mat(D, hid, 0.3f);
    w.g_b_proj = mat(P, D, 0.3f);
    w.o_norm = vec(D, 0.2f, 1.0f);
    w.o_proj = mat(hid, P, 0.3f);

    const int64_t n = 37;
    std::vector<float> x(size_t(n * hid));
    for (auto& v : x) v = nd(rng);
    auto run = [&](KdaForm form, std::vector<int64_t> cuts) {
        KdaState st;
        st.reset(c.n_heads, c.head_dim, c.conv_kernel);
        std::vector<float> out(size_t(n * hid));
        cuts.push_back(n);
        int64_t r0 = 0;
        for (int64_t r1 : cuts) {
            std::vector<int64_t> rows;
            for (int64_t r = 0; r < r1 - r0; ++r) rows.push_back(r);
            const KdaSeqRows s{rows, &st};
            ExecContext ctx(2, ops::Backend::Cpu);  // a fresh arena per call: its high-water mark is that call's
            ctx.arena().reserve(kda_scratch_bytes(c, r1 - r0));
            kda_forward(c, w, x.data() + r0 * hid, r1 - r0, {&s, 1}, out.data() + r0 * hid, ctx, form);
            EXPECT_EQ(ctx.arena().high_water_bytes(), kda_scratch_bytes(c, r1 - r0));
            EXPECT_EQ(ctx.arena().overflow_allocations(), 0u);
            r0 = r1;
        }
        return out;
    };
    const auto whole = run(KdaForm::Recurrent, {});
    EXPECT_EQ(run(KdaForm::Recurrent, {1, 2, 9, 20}), whole);
    for (const auto& cuts : {std::vector<int64_t>{}, std::vector<int64_t>{5, 30}}) {
        const auto chunked = run(KdaForm::Chunked, cuts);
        const double e = rel_error(chunked, to_f64(whole));
        std::printf("[ kda      ] block, chunked vs recurrent (%zu cuts): %.2g\n", cuts.size(), e);
        EXPECT_LE(e, 1e-5);
    }
}

}  // namespace
