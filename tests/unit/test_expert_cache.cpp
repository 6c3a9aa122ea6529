#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "experts/expert_cache.h"

using namespace sluice;

TEST(ExpertCache, BudgetIsExactAndSlotsAligned) {
    ExpertCache c(10 * 8192 + 100, 5000, 4, make_lru_policy(10));  // 5000 -> 8192-byte slots
    EXPECT_EQ(c.slot_bytes(), 8192u);
    EXPECT_EQ(c.n_slots(), 10u);
    EXPECT_LE(c.allocated_bytes(), 10u * 8192 + 100);
    uint8_t* p = c.insert({0, 1});
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 4096, 0u);
    std::memset(p, 7, c.slot_bytes());
}

TEST(ExpertCache, LruEvictsLeastRecentUnpinned) {
    ExpertCache c(3 * 4096, 4096, 1, make_lru_policy(3));
    for (int e = 0; e < 3; ++e) {
        ASSERT_NE(c.insert({0, e}), nullptr);
        c.unpin({0, e});
    }
    ASSERT_NE(c.acquire({0, 0}), nullptr);  // 0 becomes most recent
    c.unpin({0, 0});
    ASSERT_NE(c.insert({0, 3}), nullptr);  // evicts 1
    c.unpin({0, 3});
    EXPECT_TRUE(c.contains({0, 0}));
    EXPECT_FALSE(c.contains({0, 1}));
    EXPECT_TRUE(c.contains({0, 2}));
    EXPECT_EQ(c.layer_stats()[0].evictions, 1u);
    EXPECT_EQ(c.layer_stats()[0].hits, 1u);
}

TEST(ExpertCache, PinnedSlotsAreNeverEvicted) {
    ExpertCache c(2 * 4096, 4096, 1, make_lru_policy(2));
    ASSERT_NE(c.insert({0, 0}), nullptr);
    ASSERT_NE(c.insert({0, 1}), nullptr);
    EXPECT_EQ(c.insert({0, 2}), nullptr);  // both pinned
    c.unpin({0, 1});
    ASSERT_NE(c.insert({0, 2}), nullptr);
    EXPECT_TRUE(c.contains({0, 0}));
    EXPECT_FALSE(c.contains({0, 1}));
}

TEST(ExpertCache, LfuKeepsFrequentExperts) {
    ExpertCache c(2 * 4096, 4096, 1, make_lfu_policy(2));
    ASSERT_NE(c.insert({0, 0}), nullptr);
    c.unpin({0, 0});
    for (int i = 0; i < 5; ++i) {
        ASSERT_NE(c.acquire({0, 0}), nullptr);
        c.unpin({0, 0});
    }
    ASSERT_NE(c.insert({0, 1}), nullptr);
    c.unpin({0, 1});
    ASSERT_NE(c.insert({0, 2}), nullptr);  // evicts 1 (used once), not 0 (used 6 times) though 0 is older
    c.unpin({0, 2});
    EXPECT_TRUE(c.contains({0, 0}));
    EXPECT_FALSE(c.contains({0, 1}));
}

TEST(ExpertCache, ZeroBudgetAndDrop) {
    ExpertCache none(100, 4096, 1, nullptr);
    EXPECT_EQ(none.n_slots(), 0u);
    EXPECT_EQ(none.insert({0, 0}), nullptr);
    EXPECT_EQ(none.acquire({0, 0}), nullptr);
    EXPECT_EQ(none.layer_stats()[0].misses, 1u);
    ExpertCache c(4096, 4096, 1, nullptr);
    ASSERT_NE(c.insert({0, 5}), nullptr);
    c.drop({0, 5});
    EXPECT_FALSE(c.contains({0, 5}));
    EXPECT_NE(c.insert({0, 6}), nullptr);
    EXPECT_THROW(make_cache_policy("mru", 1), Error);
}
