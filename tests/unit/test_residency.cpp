// The residency plan: whole spine resident when it fits, else the first layers resident and the rest streamed
// through two slots of the largest streamed layer, the expert cache getting what is left, and a clear refusal
// (with the minimum) below what streaming every layer needs.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "experts/residency.h"

using namespace sluice;

namespace {
constexpr uint64_t MiB = uint64_t(1) << 20;
}

TEST(Residency, WholeSpineWhenItFits) {
    const std::vector<uint64_t> layers = {100 * MiB, 100 * MiB, 100 * MiB, 100 * MiB};
    const ResidencyPlan p = plan_residency(1000 * MiB, 50 * MiB, layers, 20 * MiB, 10 * MiB);
    EXPECT_FALSE(p.streams_spine());
    EXPECT_EQ(p.spine_bytes, 450 * MiB);
    EXPECT_EQ(p.expert_cache_bytes, 1000 * MiB - 450 * MiB - 30 * MiB);
    EXPECT_EQ(p.min_bytes() + p.expert_cache_bytes, p.budget_bytes);
}

TEST(Residency, StreamsTheLastLayersWhenTheSpineDoesNotFit) {
    const std::vector<uint64_t> layers = {100 * MiB, 100 * MiB, 100 * MiB, 100 * MiB, 100 * MiB, 100 * MiB};
    // fixed 50 + state/staging 30 = 80; streaming from k costs 80 + 100k + 200 (k <= 4)
    const ResidencyPlan p = plan_residency(500 * MiB, 50 * MiB, layers, 20 * MiB, 10 * MiB);
    ASSERT_TRUE(p.streams_spine());
    EXPECT_EQ(p.first_streamed_layer, 2);  // 80 + 200 + 200 = 480 <= 500; k = 3 would need 580
    EXPECT_EQ(p.spine_bytes, 250 * MiB);
    EXPECT_EQ(p.spine_streamed_bytes, 400 * MiB);
    EXPECT_EQ(p.spine_slot_bytes, 200 * MiB);
    EXPECT_EQ(p.expert_cache_bytes, 20 * MiB);
    EXPECT_LE(p.min_bytes() + p.expert_cache_bytes, p.budget_bytes);
    EXPECT_NE(p.describe().find("spine (streamed)"), std::string::npos);
}

TEST(Residency, KeepsABigFirstLayerResidentWhenThatIsCheaper) {
    // a dense first layer three times the others: streaming it would need two slots of 300
    const std::vector<uint64_t> layers = {300 * MiB, 100 * MiB, 100 * MiB, 100 * MiB, 100 * MiB};
    const ResidencyPlan p = plan_residency(620 * MiB, 0, layers, 0, 0);
    ASSERT_TRUE(p.streams_spine());
    EXPECT_EQ(p.first_streamed_layer, 2);  // 300 + 100 + 2 * 100 = 600
    EXPECT_EQ(p.spine_slot_bytes, 200 * MiB);
}

TEST(Residency, RefusesBelowTheMinimumAndSaysIt) {
    const std::vector<uint64_t> layers = {100 * MiB, 100 * MiB, 100 * MiB};
    try {
        plan_residency(279 * MiB, 50 * MiB, layers, 20 * MiB, 10 * MiB);  // minimum 50 + 200 + 30 = 280
        FAIL() << "expected an error";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("minimum working set of 280.00 MiB"), std::string::npos) << msg;
    }
    EXPECT_NO_THROW(plan_residency(280 * MiB, 50 * MiB, layers, 20 * MiB, 10 * MiB));
}

TEST(Residency, ForcedSplitForTests) {
    const std::vector<uint64_t> layers = {10 * MiB, 10 * MiB, 10 * MiB};
    const ResidencyPlan p = plan_residency(1000 * MiB, 0, layers, 0, 0, 1);
    EXPECT_EQ(p.first_streamed_layer, 1);
    EXPECT_THROW(plan_residency(29 * MiB, 0, layers, 0, 0, 1), Error);  // layer 0 + two slots of 10 = 30
}
