#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "core/error.h"
#include "runtime/sampler.h"

using namespace sluice;

TEST(Sampler, GreedyIsArgmaxLowestIdOnTies) {
    Sampler s({.temperature = 0});
    std::vector<float> l = {0.1f, 3.0f, -1.0f, 3.0f};
    EXPECT_EQ(s.sample(l), 1);
}

TEST(Sampler, SeededIsReproducibleAndFollowsTheDistribution) {
    std::vector<float> l = {0.0f, 1.0f, 2.0f, -10.0f};
    Sampler a({.temperature = 1.0f, .seed = 42}), b({.temperature = 1.0f, .seed = 42});
    std::map<int32_t, int> counts;
    for (int i = 0; i < 20000; ++i) {
        int32_t x = a.sample(l);
        EXPECT_EQ(x, b.sample(l));
        counts[x]++;
    }
    // softmax(0,1,2) = 0.090, 0.245, 0.665
    EXPECT_NEAR(counts[0] / 20000.0, 0.090, 0.015);
    EXPECT_NEAR(counts[1] / 20000.0, 0.245, 0.015);
    EXPECT_NEAR(counts[2] / 20000.0, 0.665, 0.015);
    EXPECT_LT(counts[3], 5);
}

TEST(Sampler, Truncations) {
    std::vector<float> l = {0.0f, 1.0f, 2.0f, 2.1f};
    Sampler k1({.temperature = 1.0f, .top_k = 1, .seed = 1});
    for (int i = 0; i < 100; ++i) EXPECT_EQ(k1.sample(l), 3);
    Sampler p({.temperature = 1.0f, .top_p = 0.5f, .seed = 1});
    for (int i = 0; i < 200; ++i) {
        int32_t x = p.sample(l);
        EXPECT_TRUE(x == 3 || x == 2) << x;
    }
    Sampler m({.temperature = 1.0f, .min_p = 0.5f, .seed = 1});
    for (int i = 0; i < 200; ++i) EXPECT_GE(m.sample(l), 2);
}

TEST(Sampler, RejectsBadParameters) {
    EXPECT_THROW(Sampler({.temperature = -1}), Error);
    EXPECT_THROW(Sampler({.temperature = 1, .top_p = 0}), Error);
    EXPECT_THROW(Sampler({.temperature = 1, .top_p = 1.5f}), Error);
    EXPECT_THROW(Sampler({.temperature = 1, .min_p = 2}), Error);
}

// The candidates' order is logit descending, ties by id (-0 equal to +0, NaN never first): checked against the
// plain comparison sort the sampler used before its integer keys, draw for draw, on logits full of ties, signed
// zeros and infinities, with and without top-k / top-p / min-p.
TEST(Sampler, SameDrawsAsAComparisonSort) {
    auto reference = [](const SamplingParams& p, std::mt19937_64& rng, const std::vector<float>& l) {
        std::vector<int32_t> ids(l.size());
        std::iota(ids.begin(), ids.end(), 0);
        size_t keep = p.top_k > 0 ? std::min(l.size(), size_t(p.top_k)) : l.size();
        std::partial_sort(ids.begin(), ids.begin() + ptrdiff_t(keep), ids.end(), [&](int32_t a, int32_t b) {
            return l[size_t(a)] > l[size_t(b)] || (l[size_t(a)] == l[size_t(b)] && a < b);
        });
        ids.resize(keep);
        const float mx = l[size_t(ids[0])] / p.temperature;
        std::vector<double> prob(keep);
        double sum = 0;
        for (size_t i = 0; i < keep; ++i) sum += (prob[i] = std::exp(double(l[size_t(ids[i])] / p.temperature - mx)));
        for (auto& q : prob) q /= sum;
        size_t n = keep;
        while (n > 1 && prob[n - 1] == 0) --n;
        if (p.min_p > 0)
            while (n > 1 && prob[n - 1] < double(p.min_p) * prob[0]) --n;
        if (p.top_p < 1) {
            double cum = 0;
            for (size_t i = 0; i < n; ++i)
                if ((cum += prob[i]) >= double(p.top_p)) {
                    n = i + 1;
                    break;
                }
        }
        double total = 0;
        for (size_t i = 0; i < n; ++i) total += prob[i];
        const double u = std::uniform_real_distribution<double>(0.0, total)(rng);
        double cum = 0;
        for (size_t i = 0; i < n; ++i)
            if (u < (cum += prob[i])) return ids[i];
        return ids[n - 1];
    };
    const std::vector<SamplingParams> params = {{.temperature = 1.0f, .seed = 3},
                                                {.temperature = 0.5f, .top_k = 7, .seed = 4},
                                                {.temperature = 2.0f, .top_p = 0.8f, .min_p = 0.02f, .seed = 5},
                                                {.temperature = 1e4f, .seed = 6}};
    std::mt19937 gen(9);
    for (const SamplingParams& p : params) {
        Sampler s(p);
        std::mt19937_64 ref_rng(p.seed);
        for (int step = 0; step < 300; ++step) {
            std::vector<float> l(size_t(40 + step % 50));
            for (auto& v : l) {
                const int pick = int(gen() % 8);
                v = pick == 0 ? 0.0f : pick == 1 ? -0.0f : pick == 2 ? 1.5f : pick == 3 ? -INFINITY
                                                                         : float(int(gen() % 9) - 4) * 0.25f;
            }
            ASSERT_EQ(s.sample(l), reference(p, ref_rng, l)) << "params " << &p - params.data() << " step " << step;
        }
    }
    // whole vocabularies above Sampler::kRadixSortFrom, whose candidate order comes from the radix sort: logits of
    // every sign and exponent, -0 and +0, -inf (not NaN, which the reference's comparison cannot order), and the
    // likeliest ones either tied or dense in [2, 4) with random mantissas, so that their order (and with it the
    // draws) depends on the ids of ties and on every bit of a logit
    for (const SamplingParams& p : {SamplingParams{.temperature = 0.3f, .seed = 7},
                                    SamplingParams{.temperature = 1.0f, .top_p = 0.9f, .seed = 8}}) {
        Sampler s(p);
        std::mt19937_64 ref_rng(p.seed);
        for (int step = 0; step < 40; ++step) {
            std::vector<float> l(Sampler::kRadixSortFrom + size_t(gen() % 30000));
            for (auto& v : l) {
                const int pick = int(gen() % 16);
                v = pick == 0 ? 0.0f : pick == 1 ? -0.0f : pick == 2 ? -INFINITY
                    : pick < 7 ? 3.0f + float(int(gen() % 5)) * 0.25f  // ties, 4.0 the likeliest
                    : pick < 10 ? std::ldexp(float(int(gen() % 2001) - 1000) / 1000.0f, -int(gen() % 50))
                                : 2.0f + 2.0f * float(gen() >> 8) / 16777216.0f;
            }
            ASSERT_EQ(s.sample(l), reference(p, ref_rng, l)) << "radix, seed " << p.seed << " step " << step;
        }
    }
    // the first candidate with top-k 1: -0 and +0 tie (lowest id), NaN is never it
    Sampler k1({.temperature = 1.0f, .top_k = 1, .seed = 1});
    EXPECT_EQ(k1.sample(std::vector<float>{-0.0f, 0.0f, -1.0f}), 0);
    EXPECT_EQ(k1.sample(std::vector<float>{-1.0f, 0.0f, -0.0f}), 1);
    EXPECT_EQ(k1.sample(std::vector<float>{NAN, -3.0f, -2.0f}), 2);
}
