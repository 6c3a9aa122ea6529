#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cmath>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include "core/dtype.h"
#include "core/stable_memory.h"
#include "core/error.h"
#include "core/huge_pages.h"
#include "core/thread_pool.h"

using namespace sluice;

TEST(DType, NamesRoundTrip) {
    for (auto t : {DType::F32, DType::BF16, DType::F16, DType::F8_E4M3, DType::U8, DType::I32}) {
        auto back = dtype_from_name(dtype_name(t));
        ASSERT_TRUE(back.has_value());
        EXPECT_EQ(*back, t);
    }
    EXPECT_FALSE(dtype_from_name("F12").has_value());
    EXPECT_EQ(dtype_size_bytes(DType::BF16), 2u);
}

TEST(DType, HalfConversions) {
    for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 0.333251953125f}) {
        EXPECT_EQ(f16_to_f32(f32_to_f16(f)), f) << f;
        EXPECT_EQ(bf16_to_f32(f32_to_bf16(f)), bf16_to_f32(f32_to_bf16(f)));
    }
    EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
    EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
    EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
    EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
    EXPECT_TRUE(std::isinf(f16_to_f32(0x7c00)));
}

TEST(DType, Fp8AndE8m0) {
    EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);   // 0 0111 000
    EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f); // max finite
    EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7f)));
    EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
    EXPECT_EQ(e8m0_to_f32(127), 1.0f);
    EXPECT_EQ(e8m0_to_f32(130), 8.0f);
    EXPECT_TRUE(std::isnan(e8m0_to_f32(0xff)));
}

// A device copy of weights is kept only for bytes inside a registered range, and keyed by the range's id: a later
// registration over the same addresses gets a new id, so no copy outlives the bytes it was made from.
TEST(StableMemory, FindsWhollyContainedRangesWithFreshIds) {
    std::vector<uint8_t> a(4096), b(100);
    const uint64_t ida = stable_memory::add(a.data(), a.size());
    const uint64_t idb = stable_memory::add(b.data(), b.size());
    EXPECT_NE(ida, 0u);
    EXPECT_NE(ida, idb);
    auto p = stable_memory::find(a.data() + 100, 200);
    EXPECT_EQ(p.id, ida);
    EXPECT_EQ(p.offset_bytes, 100u);
    EXPECT_EQ(stable_memory::find(a.data() + 4000, 96).id, ida);
    EXPECT_EQ(stable_memory::find(a.data() + 4000, 97).id, 0u);  // runs past the end
    EXPECT_EQ(stable_memory::find(b.data(), 100).id, idb);
    std::vector<uint8_t> c(10);
    EXPECT_EQ(stable_memory::find(c.data(), 1).id, 0u);
    stable_memory::remove(ida);
    EXPECT_EQ(stable_memory::find(a.data() + 100, 200).id, 0u);
    const uint64_t again = stable_memory::add(a.data(), a.size());
    EXPECT_NE(again, ida);
    EXPECT_EQ(stable_memory::find(a.data(), 1).id, again);
    stable_memory::remove(again);
    stable_memory::remove(idb);
}

// A slot registered by content: the id names the content, whatever slot holds it, and is replaced when the slot is
// given other content; content ids never collide with add()'s or across spaces.
TEST(StableMemory, ContentKeyedSlots) {
    std::vector<uint8_t> slot1(8192), slot2(8192);
    const uint64_t s1 = stable_memory::new_space(), s2 = stable_memory::new_space();
    EXPECT_NE(s1, s2);
    const uint64_t a = stable_memory::content_id(s1, 4, 9), b = stable_memory::content_id(s1, 4, 10);
    EXPECT_NE(a, b);
    EXPECT_NE(a, stable_memory::content_id(s2, 4, 9));
    EXPECT_NE(a, stable_memory::content_id(s1, 5, 9));
    const uint64_t plain = stable_memory::add(nullptr, 0);
    EXPECT_NE(plain, a);
    stable_memory::set_at(slot1.data(), slot1.size(), a);
    EXPECT_EQ(stable_memory::find(slot1.data() + 4096, 100).id, a);
    EXPECT_EQ(stable_memory::find(slot1.data() + 4096, 100).offset_bytes, 4096u);
    stable_memory::set_at(slot1.data(), slot1.size(), b);  // the slot now holds other content
    EXPECT_EQ(stable_memory::find(slot1.data(), 1).id, b);
    stable_memory::set_at(slot2.data(), slot2.size(), a);  // the first content, read into another slot
    EXPECT_EQ(stable_memory::find(slot2.data() + 10, 10).id, a);
    stable_memory::remove_at(slot1.data());
    EXPECT_EQ(stable_memory::find(slot1.data(), 1).id, 0u);
    EXPECT_EQ(stable_memory::find(slot2.data(), 1).id, a);
    stable_memory::remove_at(slot2.data());
    EXPECT_EQ(stable_memory::find(slot2.data(), 1).id, 0u);
    EXPECT_DEATH(stable_memory::content_id(s1, uint64_t(1) << 21, 0), "out of range");
}

TEST(ThreadPool, CoversRangeOnce) {
    ThreadPool pool(3);
    for (int64_t n : {1, 2, 7, 100, 1001}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool.parallel_for(n, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
        });
        for (auto& h : hits) EXPECT_EQ(h.load(), 1);
    }
}

TEST(ThreadPool, DynamicCoversRangeOnceInGrains) {
    ThreadPool pool(3);
    for (int64_t n : {1, 2, 7, 100, 1001})
        for (int64_t grain : {1, 3, 16, 2000}) {
            std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
            std::atomic<int> bad_ranges{0};
            pool.parallel_for_dynamic(n, grain, [&](int64_t b, int64_t e) {
                if (b % grain != 0 || (e - b != grain && e != n)) ++bad_ranges;
                for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
            });
            EXPECT_EQ(bad_ranges.load(), 0) << "n=" << n << " grain=" << grain;
            for (auto& h : hits) EXPECT_EQ(h.load(), 1) << "n=" << n << " grain=" << grain;
        }
}

TEST(ThreadPool, DynamicPropagatesErrorsAndRecovers) {
    ThreadPool pool(2);
    EXPECT_THROW(pool.parallel_for_dynamic(10, 2, [](int64_t b, int64_t) {
        if (b == 4) fail("boom");
    }), Error);
    std::atomic<int64_t> sum{0};
    pool.parallel_for_dynamic(100, 7, [&](int64_t b, int64_t e) { sum += e - b; });
    EXPECT_EQ(sum.load(), 100);
    pool.parallel_for(100, [&](int64_t b, int64_t e) { sum += e - b; });  // static jobs still work after
    EXPECT_EQ(sum.load(), 200);
}

TEST(ThreadPool, PropagatesErrors) {
    ThreadPool pool(2);
    EXPECT_THROW(pool.parallel_for(10, [](int64_t b, int64_t) {
        if (b > 0) fail("boom");
    }), Error);
    int calls = 0;
    pool.parallel_for(1, [&](int64_t, int64_t) { ++calls; });
    EXPECT_EQ(calls, 1);
}

TEST(HugePages, AlignedRoundedAndWritable) {
    EXPECT_EQ(alloc_huge_advised(0), nullptr);
    uint8_t* p = alloc_huge_advised(3 * k_huge_page_bytes / 2);  // rounded up to two huge pages
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % k_huge_page_bytes, 0u);
    p[0] = 1;
    p[2 * k_huge_page_bytes - 1] = 2;  // the last byte of the rounded size is ours
    EXPECT_EQ(p[0] + p[2 * k_huge_page_bytes - 1], 3);
    std::free(p);
    std::vector<float, HugePageAllocator<float>> v(1000, 1.5f);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % k_huge_page_bytes, 0u);
    EXPECT_EQ(v[999], 1.5f);
}

// Pages never touched are not resident; the populate thread makes every page resident and keeps the bytes of those
// already written (it maps, it never writes).
TEST(HugePages, BackgroundPopulateFaultsInWithoutWriting) {
    const size_t bytes = 8 * k_huge_page_bytes;
    uint8_t* p = alloc_huge_advised(bytes);
    ASSERT_NE(p, nullptr);
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    auto resident_pages = [&] {
        std::vector<unsigned char> in(bytes / page);
        EXPECT_EQ(mincore(p, bytes, in.data()), 0);
        size_t n = 0;
        for (unsigned char c : in) n += c & 1;
        return n;
    };
    p[0] = 11;
    p[3 * k_huge_page_bytes + 5] = 22;
    EXPECT_LT(resident_pages(), bytes / page);
    {
        BackgroundPopulate pop(p, bytes);
        pop.wait();
        EXPECT_EQ(pop.populated_bytes(), bytes);  // Linux >= 5.14 (CI's and this project's machines)
    }
    EXPECT_EQ(resident_pages(), bytes / page);
    EXPECT_EQ(p[0], 11);
    EXPECT_EQ(p[3 * k_huge_page_bytes + 5], 22);
    std::free(p);
    BackgroundPopulate stopped(nullptr, 0);  // nothing to do: constructs and joins
}
