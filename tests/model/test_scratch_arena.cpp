// The activation scratch arena (core/scratch_arena.h) on every fixture: its high-water mark after a pass of R rows is
// exactly the architecture's activation formula for R rows, which is what the memory plan reserves (and what
// `sluice plan` computes from config.json); a warm pass within the planned rows takes nothing from the heap beyond the
// arena but its sequence's token list growing; and the arena helpers themselves.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <new>

#include "core/error.h"
#include "formats/hf_config.h"
#include "models/expert_setup.h"
#include "models/model.h"
#include "ops/exec_context.h"
#include "../support/fixtures.h"

// Counts heap allocations of at least g_min_bytes while g_counting is set (any thread).
namespace {
std::atomic<bool> g_counting{false};
std::atomic<uint64_t> g_min_bytes{0};
std::atomic<uint64_t> g_large{0}, g_all{0}, g_largest{0};
void note(std::size_t n) {
    if (!g_counting.load(std::memory_order_relaxed)) return;
    g_all.fetch_add(1, std::memory_order_relaxed);
    if (n >= g_min_bytes.load(std::memory_order_relaxed)) g_large.fetch_add(1, std::memory_order_relaxed);
    uint64_t m = g_largest.load(std::memory_order_relaxed);
    while (n > m && !g_largest.compare_exchange_weak(m, n)) {
    }
}
}  // namespace

// (GCC cannot see that these replacements pair malloc with free themselves)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t n) {
    note(n);
    if (void* p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace sluice {
namespace {

using test::fixture_dirs;
using test::fixture_name;

class FixtureScratch : public ::testing::TestWithParam<std::string> {};

// `rows` rows of one sequence from position `from` (the last row wants logits).
Batch rows_from(const Model& m, int64_t from, int64_t rows) {
    Batch b;
    const int64_t vocab = m.info().vocab_size;
    for (int64_t i = 0; i < rows; ++i) b.add(int32_t((7 * (from + i) + 3) % vocab), from + i, 0, i + 1 == rows);
    return b;
}

void run_batch(Model& m, ExecContext& ctx, SequenceState* s, const Batch& b, std::vector<float>& logits) {
    SequenceState* seqs[] = {s};
    m.forward(ctx, b, seqs, logits);
}

// One pass of `rows` rows of sequence `s` from position `from`.
void run_pass(Model& m, ExecContext& ctx, SequenceState* s, int64_t from, int64_t rows, std::vector<float>& logits) {
    run_batch(m, ctx, s, rows_from(m, from, rows), logits);
}

TEST_P(FixtureScratch, HighWaterIsTheReservedFormula) {
    const std::string dir = GetParam();
    constexpr int64_t kRows = 13;
    LoadOptions lo;
    lo.n_threads = 2;
    lo.max_pass_rows = kRows;
    lo.memory_budget_bytes = uint64_t(1) << 30;  // experts stream: the look-ahead routing runs too
    auto model = load_model(dir, lo);
    auto ctx = make_exec_context(*model);  // what the engine makes: the planned threads, an arena for kRows
    const ScratchArena* arena = &ctx->arena();
    const uint64_t want = model->activation_bytes(kRows);
    ASSERT_GT(want, 0u);
    // reserved once, in the plan and in the arena
    ASSERT_NE(model->residency(), nullptr);
    EXPECT_EQ(model->residency()->activation_bytes, want);
    EXPECT_EQ(arena->capacity_bytes(), want);
    // sluice plan's number: the same formula from config.json alone
    const JsonObject cfg = JsonObject::load_file(dir + "/config.json");
    EXPECT_EQ(activation_bytes_from_config(cfg, kRows, true), want);

    auto seq = model->new_sequence();
    std::vector<float> logits;
    run_pass(*model, *ctx, seq.get(), 0, kRows, logits);
    EXPECT_EQ(arena->high_water_bytes(), want) << "the formula and what the blocks carve disagree";
    EXPECT_EQ(arena->overflow_allocations(), 0u);
    EXPECT_EQ(arena->used_bytes(), 0u);
    // smaller passes stay within it; the formula is exact for them too
    for (int64_t r : {1, 5}) {
        auto s2 = model->new_sequence();
        run_pass(*model, *ctx, s2.get(), 0, r, logits);
        EXPECT_EQ(arena->high_water_bytes(), want);
        EXPECT_EQ(arena->overflow_allocations(), 0u);
    }
    // a pass past the plan still runs (from the heap), and says so
    auto s3 = model->new_sequence();
    run_pass(*model, *ctx, s3.get(), 0, kRows + 3, logits);
    EXPECT_GT(arena->overflow_allocations(), 0u);
    EXPECT_EQ(arena->high_water_bytes(), model->activation_bytes(kRows + 3));
}

TEST_P(FixtureScratch, PassAllocatesNoActivations) {
    const std::string dir = GetParam();
    constexpr int64_t kRows = 24;  // within the first cache page: the pass below adds no page to the state
    LoadOptions lo;
    // one thread: the ops' per-thread scratch (grown once per thread) is warm after the first pass, whichever
    // worker a task would land on
    lo.n_threads = 1;
    lo.max_pass_rows = kRows;
    auto model = load_model(dir, lo);
    auto ctx = make_exec_context(*model);
    std::vector<float> logits;
    // warm: another sequence runs the same two passes first, so the ops' per-thread scratch (attention's score
    // rows grow with the context) has the size the measured pass needs; then this sequence's first cache page
    auto other = model->new_sequence();
    run_pass(*model, *ctx, other.get(), 0, kRows / 2, logits);
    run_pass(*model, *ctx, other.get(), kRows / 2, kRows / 2, logits);
    auto seq = model->new_sequence();
    run_pass(*model, *ctx, seq.get(), 0, kRows / 2, logits);
    // an activation buffer is at least rows x hidden floats; nothing that large may come from the heap
    g_min_bytes = uint64_t(kRows / 2) * uint64_t(model->info().hidden_size) * sizeof(float);
    g_large = 0;
    g_all = 0;
    g_largest = 0;
    const Batch measured = rows_from(*model, kRows / 2, kRows / 2);  // the caller's batch: made before counting
    g_counting = true;
    run_batch(*model, *ctx, seq.get(), measured, logits);
    g_counting = false;
    EXPECT_EQ(g_large.load(), 0u) << "heap allocations of >= " << g_min_bytes.load() << " bytes in a pass (largest "
                                   << g_largest.load() << ")";
    EXPECT_EQ(ctx->arena().overflow_allocations(), 0u);
    // and nothing else but the sequence's token list growing (12 ids into a list of 12: one insert doubles it); the
    // bookkeeping a pass used to rebuild is kept, and callbacks are borrowed (core/function_ref.h)
    EXPECT_LE(g_all.load(), 1u) << "heap allocations in a warm pass (largest " << g_largest.load() << " bytes)";
    RecordProperty("small_allocations", std::to_string(g_all.load()));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureScratch, ::testing::ValuesIn(fixture_dirs()), fixture_name);

TEST(ScratchArenaUnit, StackScopesAndOverflow) {
    ScratchArena a;
    a.reserve(1000);
    EXPECT_EQ(a.capacity_bytes(), ScratchArena::aligned(1000));
    {
        ScratchArena::Scope s(a);
        float* x = a.f32(10);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(x) % ScratchArena::kAlignBytes, 0u);
        {
            ScratchArena::Scope t(a);
            float* y = a.f32(100);
            EXPECT_EQ(y - x, 16);  // 40 bytes rounded to one 64-byte line
            EXPECT_EQ(a.used_bytes(), ScratchArena::f32_bytes(10) + ScratchArena::f32_bytes(100));
        }
        EXPECT_EQ(a.used_bytes(), ScratchArena::f32_bytes(10));
        float* big = a.f32(1000);  // past the reservation: from the heap
        big[999] = 1.0f;
        EXPECT_EQ(a.overflow_allocations(), 1u);
    }
    EXPECT_EQ(a.used_bytes(), 0u);
    EXPECT_EQ(a.high_water_bytes(), ScratchArena::f32_bytes(10) + ScratchArena::f32_bytes(1000));
}

TEST(ScratchArenaUnit, TooSmallBudgetNamesTheLargestPass) {
    const std::vector<uint64_t> layers = {1000, 1000};
    auto act = [](int64_t rows) { return uint64_t(rows) * 100; };
    // spine 2000 + state 500 + staging 500 + 100 per row: 10000 fits 70 rows
    const ResidencyPlan ok = plan_residency_for_rows(10000, 0, layers, 500, act, 70, 500);
    EXPECT_EQ(ok.activation_bytes, 7000u);
    try {
        (void)plan_residency_for_rows(10000, 0, layers, 500, act, 1024, 500);
        FAIL() << "expected an error";
    } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("minimum working set"), std::string::npos) << what;
        EXPECT_NE(what.find("the largest pass that fits this budget is 70 rows"), std::string::npos) << what;
    }
}

}  // namespace
}  // namespace sluice
