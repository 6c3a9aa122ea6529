// The prefix cache's content-addressed index (runtime/prefix_index) and its byte accounting, on states made by hand
// (no model): lookups find the longest reusable prefix through chained block keys, entries sharing pages count them
// once, and evicting or replacing entries releases exactly what no other entry holds.
#include <gtest/gtest.h>

#include <numeric>

#include "runtime/prefix_cache.h"
#include "runtime/prefix_index.h"

using namespace sluice;

namespace {

constexpr int64_t B = PrefixIndex::k_block_tokens;

std::vector<int32_t> seq(int64_t n, int32_t first = 0) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    std::iota(t.begin(), t.end(), first);
    return t;
}

std::vector<int32_t> join(std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

std::shared_ptr<const StateLayout> two_layers() {
    auto l = std::make_shared<StateLayout>();
    l->add_latent(8);
    l->add_kv(4);
    return l;
}

// A state of `tokens` whose rows hold the token's value, grown from `from` (a fork shares from's pages).
std::unique_ptr<SequenceState> grow(std::unique_ptr<SequenceState> s, std::span<const int32_t> tokens) {
    for (size_t i = size_t(s->n_past()); i < tokens.size(); ++i) {
        std::fill_n(s->latent(0).data.write_row(int64_t(i)), 8, float(tokens[i]));
        std::fill_n(s->kv(1).k.write_row(int64_t(i)), 4, float(tokens[i]));
        std::fill_n(s->kv(1).v.write_row(int64_t(i)), 4, float(tokens[i]));
        s->append(tokens.subspan(i, 1));
    }
    return s;
}

TEST(PrefixIndex, VisitsDeepestSharersFirstWithTheirDepth) {
    PrefixIndex idx;
    const auto a = seq(3 * B), b = join(seq(B), seq(2 * B, 500)), c = seq(5);
    idx.add(1, a);
    idx.add(2, b);
    idx.add(3, c);
    std::vector<std::pair<PrefixIndex::Id, int64_t>> seen;
    idx.visit(join(seq(2 * B + 3), {9}), [&](PrefixIndex::Id id, int64_t shared) {
        seen.push_back({id, shared});
        return true;
    });
    ASSERT_EQ(seen.size(), 3u);
    EXPECT_EQ(seen[0], (std::pair<PrefixIndex::Id, int64_t>{1, 2 * B}));
    EXPECT_EQ(seen[1], (std::pair<PrefixIndex::Id, int64_t>{2, B}));
    EXPECT_EQ(seen[2], (std::pair<PrefixIndex::Id, int64_t>{3, 0}));
    // nothing shares a first token of 7777; removing drops the keys no entry holds
    int calls = 0;
    idx.visit(seq(40, 7777), [&](PrefixIndex::Id, int64_t) { return ++calls > 0; });
    EXPECT_EQ(calls, 0);
    const size_t keys = idx.keys();
    idx.remove(2, b);
    EXPECT_EQ(idx.keys(), keys - 2);  // the keys of b's last two blocks (its first block and token are a's too)
    idx.remove(1, a);
    idx.remove(3, c);
    EXPECT_EQ(idx.keys(), 0u);
}

TEST(PrefixCacheIndex, LongestReuseAmongManyEntries) {
    auto layout = two_layers();
    PrefixCache cache(uint64_t(1) << 30);
    // 200 entries: a common head of 40 tokens, then 30 tokens of their own
    const auto head = seq(40);
    auto base = grow(std::make_unique<SequenceState>(layout), head);
    for (int i = 0; i < 200; ++i) cache.insert(grow(base->fork(), join(head, seq(30, 1000 * (i + 1)))));
    EXPECT_EQ(cache.stats().entries, 200);
    const auto prompt = join(join(head, seq(17, 1000 * 77)), {5, 5, 5});
    EXPECT_EQ(cache.longest(prompt, 1000), 57);
    auto s = cache.lookup(prompt, 1000);
    ASSERT_TRUE(s);
    EXPECT_EQ(s->n_past(), 57);
    EXPECT_EQ(s->latent(0).data.row(56)[0], float(1000 * 77 + 16));
    EXPECT_EQ(cache.longest(prompt, 50), 50);            // at most max_tokens
    EXPECT_EQ(cache.longest(seq(10, 3), 100), 0);        // nothing starts so
    EXPECT_EQ(cache.longest(join(seq(3), {9}), 100), 3); // a head shorter than one block
}

TEST(PrefixCacheIndex, SharedPagesCountOnce) {
    auto layout = two_layers();
    PrefixCache cache(uint64_t(1) << 30);
    const auto a = seq(150);
    auto sa = grow(std::make_unique<SequenceState>(layout), a);
    // b shares a's first 130 tokens: the fork shares a's first two pages (rows 0-127), copies the third on write
    auto fb = sa->fork();
    fb->truncate(130);
    const auto b = join(std::vector<int32_t>(a.begin(), a.begin() + 130), seq(40, 9000));
    auto sb = grow(std::move(fb), b);
    const uint64_t size_a = sa->size_bytes(), size_b = sb->size_bytes();
    const uint64_t shared = 2 * (8 + 4 + 4) * PagedRows::k_page_rows * sizeof(float);  // two pages of three caches
    cache.insert(std::move(sa));
    EXPECT_EQ(cache.stats().bytes, size_a);
    cache.insert(std::move(sb));
    EXPECT_EQ(cache.stats().entries, 2);
    EXPECT_EQ(cache.stats().bytes, size_a + size_b - shared);
    // a capacity that holds both only with sharing counted once keeps both
    PrefixCache tight(size_a + size_b - shared);
    auto ta = grow(std::make_unique<SequenceState>(layout), a);
    auto tb = ta->fork();
    tb->truncate(130);
    tb = grow(std::move(tb), b);
    tight.insert(std::move(ta));
    tight.insert(std::move(tb));
    EXPECT_EQ(tight.stats().entries, 2);
    EXPECT_EQ(tight.stats().evicted, 0);
    // one more entry evicts the least recently used (a, unless a lookup used it): the bytes it alone held go
    tight.lookup(a, 149);
    auto tc = grow(std::make_unique<SequenceState>(layout), seq(10, 5000));
    const uint64_t size_c = tc->size_bytes();
    tight.insert(std::move(tc));
    EXPECT_EQ(tight.stats().entries, 2);
    EXPECT_EQ(tight.longest(b, 1000), 130);  // b went: only a's head is left for it
    EXPECT_EQ(tight.stats().bytes, size_a + size_c);
}

TEST(PrefixCacheIndex, AStateCoversItsPrefixes) {
    auto layout = two_layers();
    PrefixCache cache(uint64_t(1) << 30);
    auto s1 = grow(std::make_unique<SequenceState>(layout), seq(40));
    auto s2 = grow(s1->fork(), seq(90));
    const uint64_t size2 = s2->size_bytes();
    cache.insert(std::move(s1));
    cache.insert(std::move(s2));  // serves every prefix s1 served: s1 goes
    EXPECT_EQ(cache.stats().entries, 1);
    EXPECT_EQ(cache.stats().bytes, size2);
    EXPECT_EQ(cache.longest(seq(60), 1000), 60);
}

}  // namespace
