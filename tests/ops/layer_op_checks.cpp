// The op harness's checks of the MoE ops (routing, gated activations, combine), MLA's absorption and RoPE's rotation
// against their ops::ref twins (tests/ops/op_harness.cpp runs them), and expert_group against the experts one by
// one; CPU only for now.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "harness_util.h"
#include "ops/exec_context.h"
#include "ops/mla_ops.h"
#include "ops/moe_ops.h"
#include "ops/ops.h"
#include "ops/quantize.h"
#include "ops/rope.h"

using namespace sluice;

// ---- the MoE ops (routing, gated activations, combine) against their twins; CPU only for now ----

void check_moe_ops(const char* name, ThreadPool& pool, std::mt19937& rng) {
    using S = ops::RouterSpec::Scoring;
    struct R {
        S scoring;
        int64_t experts, k, groups, keep;
        bool norm, bias;
        float scaling;
    };
    const R routers[] = {{S::Sigmoid, 64, 6, 8, 3, true, true, 2.5f},    {S::Sigmoid, 896, 16, 1, 1, true, true, 2.827f},
                         {S::Sigmoid, 24, 4, 1, 1, false, false, 1.0f},  {S::Softmax, 128, 8, 1, 1, true, false, 1.0f},
                         {S::Softmax, 8, 2, 1, 1, false, false, 1.0f},   {S::TopkSoftmax, 32, 4, 1, 1, false, false, 1.0f}};
    for (const auto& c : routers) {
        const ops::RouterSpec spec{c.scoring, c.experts, c.k, c.groups, c.keep, c.norm, c.scaling};
        for (int64_t n : {1, 7, 300}) {
            const auto logits = random_vec(n * c.experts, rng, 2.0f);
            const auto bias = random_vec(c.experts, rng, 0.1f);
            const float* b = c.bias ? bias.data() : nullptr;
            std::vector<int32_t> e(static_cast<size_t>(n * c.k), -1), re(e.size());
            std::vector<float> w(e.size(), std::nanf("")), rw(e.size());
            ops::route(spec, logits.data(), b, n, e.data(), w.data(), pool);
            ops::ref::route(spec, logits.data(), b, n, re.data(), rw.data());
            std::string why;
            for (size_t i = 0; i < e.size() && why.empty(); ++i) {
                if (e[i] != re[i]) why = cat("slot ", i, ": expert ", e[i], ", want ", re[i]);
                else if (!(std::fabs(double(w[i]) - rw[i]) <= 1e-6 * std::fabs(rw[i]) + 1e-9))
                    why = cat("slot ", i, ": weight ", w[i], ", want ", rw[i]);
            }
            const std::string what = cat(name, " route scoring ", int(c.scoring), " E", c.experts, " k", c.k, " groups ",
                                         c.groups, "/", c.keep, " n=", n);
            report(why.empty(), what + " vs reference: " + why);
            std::vector<int32_t> e1(static_cast<size_t>(c.k));
            std::vector<float> w1(static_cast<size_t>(c.k));
            const int64_t last = n - 1;
            ops::route(spec, logits.data() + last * c.experts, b, 1, e1.data(), w1.data(), pool);
            report(std::equal(e1.begin(), e1.end(), e.begin() + last * c.k) &&
                       same_bits(w1.data(), w.data() + last * c.k, c.k),
                   what + ": a row's routing depends on the other rows");
        }
    }
    using K = ops::GluSpec::Kind;
    for (K kind : {K::Silu, K::Situ, K::ClampedSwiglu}) {
        for (int64_t stride : {1, 2}) {
            const int64_t n = 1000;
            auto gu = random_vec(n * 2, rng, 4.0f);
            gu[0] = 100.0f, gu[1] = -100.0f, gu[2] = -100.0f, gu[3] = 100.0f;  // past the clamps and the saturations
            ops::GluSpec spec;
            spec.kind = kind;
            const float* gate = gu.data();
            const float* up = stride == 1 ? gu.data() + n : gu.data() + 1;
            std::vector<float> y(static_cast<size_t>(n), std::nanf("")), ref(y.size());
            ops::glu(spec, gate, up, stride, n, y.data());
            ops::ref::glu(spec, gate, up, stride, n, ref.data());
            std::string why;
            for (int64_t i = 0; i < n && why.empty(); ++i)
                if (!(std::fabs(double(y[size_t(i)]) - ref[size_t(i)]) <= 2e-6 * std::fabs(ref[size_t(i)]) + 1e-6))
                    why = cat("element ", i, ": got ", y[size_t(i)], ", want ", ref[size_t(i)]);
            report(why.empty(), cat(name, " glu kind ", int(kind), " stride ", stride, " vs reference: ", why));
        }
    }
    struct C {
        int64_t n, k, hidden;
    };
    for (const C& c : {C{1, 1, 7}, C{5, 16, 300}, C{64, 8, 129}, C{3, 4, 2048}}) {
        const auto y = random_vec(c.n * c.k * c.hidden, rng), w = random_vec(c.n * c.k, rng, 0.3f);
        std::vector<float> out(static_cast<size_t>(c.n * c.hidden), std::nanf("")), ref(out.size());
        ops::moe_combine(y.data(), w.data(), c.n, c.k, c.hidden, out.data(), pool);
        ops::ref::moe_combine(y.data(), w.data(), c.n, c.k, c.hidden, ref.data());
        std::string why;
        for (int64_t r = 0; r < c.n && why.empty(); ++r)
            for (int64_t j = 0; j < c.hidden && why.empty(); ++j) {
                double mag = 0;
                for (int64_t k = 0; k < c.k; ++k) mag += std::fabs(double(w[size_t(r * c.k + k)]) * y[size_t((r * c.k + k) * c.hidden + j)]);
                const size_t i = size_t(r * c.hidden + j);
                if (!(std::fabs(double(out[i]) - ref[i]) <= 1e-6 * mag + 1e-30))
                    why = cat("row ", r, " column ", j, ": got ", out[i], ", want ", ref[i]);
            }
        report(why.empty(), cat(name, " moe_combine n=", c.n, " k", c.k, " hidden ", c.hidden, " vs reference: ", why));
    }
}

// ---- MLA's absorption against its twin; CPU only for now ----

void check_mla_ops(const char* name, ThreadPool& pool, std::mt19937& rng) {
    struct M {
        ops::MlaHeads h;
        int64_t n;
    };
    const M cases[] = {{{3, 16, 8, 16, 32}, 5}, {{8, 128, 64, 128, 512}, 3}, {{2, 32, 0, 64, 64}, 40}};
    for (auto f : {WeightFormat::F32, WeightFormat::BF16, WeightFormat::FP8_E4M3_B128}) {
        for (const auto& c : cases) {
            const auto& m = c.h;
            const auto wf = random_vec(m.heads * (m.nope + m.v) * m.rank, rng, 0.05f);
            const QuantizedWeight qw = quantize(wf.data(), m.heads * (m.nope + m.v), m.rank, f);
            const Weight w = qw.view();
            const std::string what = cat(name, " MLA ", weight_format_name(f), " heads ", m.heads, " nope ", m.nope,
                                         " rope ", m.rope, " v ", m.v, " rank ", m.rank, " n=", c.n);
            // absorb: |got - want| <= 1e-5 * sum |q w| (want from the twin in double)
            const auto q = random_vec(c.n * m.heads * (m.nope + m.rope), rng);
            const int64_t cw = m.rank + m.rope;
            std::vector<float> got(static_cast<size_t>(c.n * m.heads * cw), std::nanf("")), want(got.size());
            ops::mla_absorb(m, w, q.data(), c.n, got.data(), pool);
            ops::ref::mla_absorb(m, w, q.data(), c.n, want.data());
            std::vector<float> row(static_cast<size_t>(m.rank));
            std::string why;
            for (int64_t r = 0; r < c.n && why.empty(); ++r)
                for (int64_t h = 0; h < m.heads && why.empty(); ++h) {
                    std::vector<double> mag(static_cast<size_t>(m.rank), 0.0);
                    for (int64_t i = 0; i < m.nope; ++i) {
                        ops::ref::dequantize_row(w, h * (m.nope + m.v) + i, row.data());
                        for (int64_t j = 0; j < m.rank; ++j)
                            mag[size_t(j)] += std::fabs(double(q[size_t((r * m.heads + h) * (m.nope + m.rope) + i)]) * row[size_t(j)]);
                    }
                    for (int64_t j = 0; j < cw && why.empty(); ++j) {
                        const size_t at = size_t((r * m.heads + h) * cw + j);
                        const double tol = j < m.rank ? 1e-5 * mag[size_t(j)] + 1e-30 : 0.0;
                        if (!(std::fabs(double(got[at]) - want[at]) <= tol))
                            why = cat("absorb row ", r, " head ", h, " column ", j, ": got ", got[at], ", want ", want[at]);
                    }
                }
            report(why.empty(), what + " absorb vs reference: " + why);
            // unabsorb
            const auto lat = random_vec(c.n * m.heads * m.rank, rng);
            std::vector<float> o(static_cast<size_t>(c.n * m.heads * m.v), std::nanf("")), oref(o.size());
            ops::mla_unabsorb(m, w, lat.data(), c.n, o.data(), pool);
            ops::ref::mla_unabsorb(m, w, lat.data(), c.n, oref.data());
            why.clear();
            for (int64_t h = 0; h < m.heads && why.empty(); ++h)
                for (int64_t i = 0; i < m.v && why.empty(); ++i) {
                    ops::ref::dequantize_row(w, h * (m.nope + m.v) + m.nope + i, row.data());
                    for (int64_t r = 0; r < c.n && why.empty(); ++r) {
                        double mag = 0;
                        for (int64_t j = 0; j < m.rank; ++j)
                            mag += std::fabs(double(row[size_t(j)]) * lat[size_t((r * m.heads + h) * m.rank + j)]);
                        const size_t at = size_t((r * m.heads + h) * m.v + i);
                        if (!(std::fabs(double(o[at]) - oref[at]) <= 1e-5 * mag + 1e-30))
                            why = cat("unabsorb row ", r, " head ", h, " output ", i, ": got ", o[at], ", want ", oref[at]);
                    }
                }
            report(why.empty(), what + " unabsorb vs reference: " + why);
            // a row alone: the same bits
            std::vector<float> one(static_cast<size_t>(m.heads * cw));
            const int64_t last = c.n - 1;
            ops::mla_absorb(m, w, q.data() + last * m.heads * (m.nope + m.rope), 1, one.data(), pool);
            report(same_bits(one.data(), got.data() + last * m.heads * cw, m.heads * cw),
                   what + ": a row's absorbed query depends on the other rows");
        }
    }
}

// ---- RoPE's rotation against its twin; CPU only for now ----

void check_rope(const char* name, std::mt19937& rng) {
    struct R {
        int64_t half, heads, stride;
    };
    std::uniform_real_distribution<float> angle(-3.2f, 3.2f);
    for (auto layout : {ops::RopeLayout::Interleaved, ops::RopeLayout::Half})
        for (const R& r : {R{32, 1, 64}, R{32, 16, 192}, R{3, 5, 7}, R{64, 8, 128}}) {
            std::vector<float> c(static_cast<size_t>(r.half)), s(c.size());
            for (int64_t i = 0; i < r.half; ++i) {
                const float a = angle(rng);
                c[size_t(i)] = std::cos(a) * 1.2f;  // YaRN's attention factor scales both
                s[size_t(i)] = std::sin(a) * 1.2f;
            }
            const auto x0 = random_vec(r.heads * r.stride, rng);
            auto got = x0, want = x0;
            ops::rope_rotate(layout, c.data(), s.data(), r.half, got.data(), r.heads, r.stride);
            ops::ref::rope_rotate(layout, c.data(), s.data(), r.half, want.data(), r.heads, r.stride);
            std::string why;
            for (size_t i = 0; i < got.size() && why.empty(); ++i)
                if (!(std::fabs(double(got[i]) - want[i]) <= 1e-6 * (std::fabs(double(want[i])) + 1.0)))
                    why = cat("element ", i, ": got ", got[i], ", want ", want[i]);
            report(why.empty(), cat(name, " rope ", layout == ops::RopeLayout::Half ? "half" : "interleaved", " half ",
                                    r.half, " heads ", r.heads, " stride ", r.stride, " vs reference: ", why));
        }
}

// ---- expert_group against experts_one_by_one (bit for bit) and its twin; CPU ----

void check_expert_group(const char* name, ExecContext& ctx, std::mt19937& rng) {
    struct G {
        int64_t hidden, inter;
    };
    ExecContext one(1, ops::Backend::Cpu), three(3, ops::Backend::Cpu);
    const WeightFormat formats[] = {WeightFormat::BF16, WeightFormat::MXFP4, WeightFormat::Q8_0, WeightFormat::F32,
                                    WeightFormat::INT4_G32, WeightFormat::FP8_E4M3_B128};
    int64_t case_no = 0;
    for (auto f : formats)
        for (const G& s : {G{64, 32}, G{256, 96}, G{512, 320}})
            for (int64_t count : {1, 2, 3, 8, 16})
                for (int64_t n : {1, 5, 64}) {
                    // the larger shapes with every group size but fewer row counts: the harness stays quick
                    if (s.hidden == 512 && n == 5) continue;
                    if ((f == WeightFormat::F32 || f == WeightFormat::FP8_E4M3_B128) && (count == 3 || n == 5)) continue;
                    // --small (under an emulator): groups up to g_max_work multiply-adds, which still include ones
                    // above the op's 2^20 threshold for its parallel section
                    if (count * n * 3 * s.hidden * s.inter > g_max_work) continue;
                    ++case_no;
                    const RandomExpertGroup eg(count, s.hidden, s.inter, f, n, 0.5, rng);
                    const int64_t K = count;
                    const std::vector<ops::GroupExpert> group = eg.group(eg.order);
                    const int64_t rows = eg.rows();
                    ops::GluSpec act;
                    if (case_no % 3 == 1) act.kind = ops::GluSpec::Kind::Situ;
                    const auto x = random_vec(n * s.hidden, rng);
                    const size_t out_size = size_t(n * K * s.hidden);
                    std::vector<float> scratch(size_t(ops::expert_group_scratch_floats(rows, s.hidden, s.inter)));
                    auto run = [&](bool grouped, ExecContext& c) {
                        std::vector<float> y(out_size, std::nanf(""));
                        std::fill(scratch.begin(), scratch.end(), std::nanf(""));
                        if (grouped)
                            ops::expert_group(act, group, x.data(), K, s.hidden, y.data(), scratch.data(), c);
                        else
                            ops::experts_one_by_one(act, group, x.data(), K, s.hidden, y.data(), scratch.data(), c);
                        return y;
                    };
                    const auto y = run(true, ctx);
                    const std::string what = cat(name, " expert_group ", weight_format_name(f), " hidden ", s.hidden,
                                                 " inter ", s.inter, " experts ", count, " n=", n,
                                                 act.kind == ops::GluSpec::Kind::Situ ? " situ" : " silu");
                    report(same_bits(y.data(), run(false, ctx).data(), int64_t(out_size)),
                           what + ": not the bits of the experts one by one");
                    report(same_bits(y.data(), run(true, one).data(), int64_t(out_size)) &&
                               same_bits(y.data(), run(true, three).data(), int64_t(out_size)),
                           what + ": bits depend on the thread count");
                    // every routed slot written, the others left alone; near the twin
                    std::vector<float> ref(out_size, std::nanf(""));
                    ops::ref::expert_group(act, group, x.data(), K, s.hidden, ref.data());
                    std::string why;
                    for (int64_t sl = 0; sl < n * K && why.empty(); ++sl) {
                        const bool routed = std::isfinite(ref[size_t(sl * s.hidden)]);
                        double big = 0;
                        for (int64_t j = 0; j < s.hidden; ++j) big = std::max(big, std::fabs(double(ref[size_t(sl * s.hidden + j)])));
                        for (int64_t j = 0; j < s.hidden && why.empty(); ++j) {
                            const float got = y[size_t(sl * s.hidden + j)], want = ref[size_t(sl * s.hidden + j)];
                            if (!routed && !std::isnan(got)) why = cat("slot ", sl, " (not routed) written");
                            else if (routed && !(std::fabs(double(got) - want) <= 1e-4 * big + 1e-6))
                                why = cat("slot ", sl, " column ", j, ": got ", got, ", want ", want);
                        }
                    }
                    report(why.empty(), what + " vs reference: " + why);
                }
}
