#include <gtest/gtest.h>

#include <map>
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
