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

namespace {
// Each "token" visits layers 1..3 in order and uses experts 0 and 1 of each: a working set of 6 experts cycled
// through a cache of 4. Returns the hits after the first token.
uint64_t cyclic_hits(std::unique_ptr<CachePolicy> policy) {
    ExpertCache c(4 * 4096, 4096, 4, std::move(policy));
    uint64_t hits = 0;
    for (int token = 0; token < 20; ++token)
        for (int32_t layer = 1; layer <= 3; ++layer)
            for (int32_t e = 0; e < 2; ++e) {
                const ExpertKey k{layer, e};
                if (c.acquire(k)) {
                    hits += token > 0 ? 1 : 0;
                    c.unpin(k);
                } else if (c.insert(k)) {  // nullptr: not admitted (next-use), read into staging
                    c.unpin(k);
                }
            }
    return hits;
}
}  // namespace

TEST(ExpertCache, NextUseKeepsTheExpertsOfTheComingLayersInALayerCycle) {
    // LRU evicts exactly the expert needed next, every time: no hit at all once the cycle is larger than the cache
    EXPECT_EQ(cyclic_hits(make_lru_policy(4)), 0u);
    // next-use evicts from the layer just run (its experts are needed last) and keeps the rest: of each token's 6
    // fetches, 4 - 2 = 2 at least hit (the experts kept for the next layers)
    EXPECT_GE(cyclic_hits(make_next_use_policy(4)), 19u * 2u);
    EXPECT_EQ(make_cache_policy("next-use", 4)->name(), "next-use");
}
