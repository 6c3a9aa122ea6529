// What the op harness's files share (tests/ops): the pass/fail tally, random inputs, and bit comparison.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "ops/exec_context.h"
#include "ops/kda.h"
#include "ops/moe_ops.h"
#include "ops/quantize.h"

inline int g_passed = 0, g_failed = 0;
extern int64_t g_max_work;  // op_harness.cpp: --small (under an emulator) skips work above this

inline void report(bool ok, const std::string& what) {
    if (ok) {
        ++g_passed;
    } else {
        ++g_failed;
        std::printf("FAIL %s\n", what.c_str());
    }
}

inline std::vector<float> random_vec(int64_t n, std::mt19937& rng, float scale = 1.0f) {
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = d(rng);
    return v;
}

inline bool same_bits(const float* a, const float* b, int64_t count) {
    return count == 0 || std::memcmp(a, b, size_t(count) * 4) == 0;  // empty vectors may have null data()
}

// A random expert group for the expert_group checks: `count` experts of random gate, up and down weights in format f
// ([inter, hidden], [inter, hidden], [hidden, inter]; w holds their views, 3 per expert), routed from n rows with
// top_k = count (row r's slot for expert e is r * count + e): each row takes each expert with probability `take`,
// and expert e always has row e % n, so every expert has 1..n rows; `order` is the experts in a shuffled order
// (the arrival order must not matter). group(ord) gives the op's GroupExpert list in that order.
struct RandomExpertGroup {
    std::vector<sluice::QuantizedWeight> q;
    std::vector<sluice::Weight> w;
    std::vector<std::vector<int64_t>> slots;
    std::vector<int64_t> order;
    // odd_f: the format of the odd-numbered experts (default: f; a group that mixes formats)
    RandomExpertGroup(int64_t count, int64_t hidden, int64_t inter, sluice::WeightFormat f, int64_t n, double take,
                      std::mt19937& rng, std::optional<sluice::WeightFormat> odd_f = std::nullopt)
        : slots(static_cast<size_t>(count)), order(static_cast<size_t>(count)) {
        for (int64_t e = 0; e < count; ++e) {
            const auto g = random_vec(inter * hidden, rng, 0.1f), u = random_vec(inter * hidden, rng, 0.1f),
                       d = random_vec(hidden * inter, rng, 0.1f);
            const sluice::WeightFormat fe = e % 2 == 1 && odd_f ? *odd_f : f;
            q.push_back(sluice::quantize(g.data(), inter, hidden, fe));
            q.push_back(sluice::quantize(u.data(), inter, hidden, fe));
            q.push_back(sluice::quantize(d.data(), hidden, inter, fe));
        }
        for (const auto& m : q) w.push_back(m.view());
        std::bernoulli_distribution takes(take);
        for (int64_t e = 0; e < count; ++e)
            for (int64_t r = 0; r < n; ++r)
                if (r == e % n || takes(rng)) slots[size_t(e)].push_back(r * count + e);
        for (int64_t e = 0; e < count; ++e) order[size_t(e)] = e;
        std::shuffle(order.begin(), order.end(), rng);
    }
    std::vector<sluice::ops::GroupExpert> group(const std::vector<int64_t>& ord) const {
        std::vector<sluice::ops::GroupExpert> g;
        for (int64_t e : ord)
            g.push_back({&w[size_t(3 * e)], &w[size_t(3 * e + 1)], &w[size_t(3 * e + 2)], slots[size_t(e)].data(),
                         int64_t(slots[size_t(e)].size())});
        return g;
    }
    int64_t rows() const {
        int64_t r = 0;
        for (const auto& s : slots) r += int64_t(s.size());
        return r;
    }
};

// tests/ops/block_op_checks.cpp: KDA's delta rule and the KDA block's elementwise ops; the residual add, bias add
// and sigmoid
// The recurrent delta rule for `heads` heads of one sequence (ops::kda_recurrent_heads's contract).
using KdaFn = std::function<void(const sluice::KdaHeadIo&, int64_t heads, int64_t T, int64_t D, float* S)>;
void check_kda(const char* name, const KdaFn& recurrent, bool chunked_too, bool like_cpu, std::mt19937& rng);
void check_kda_block_ops(const char* name, sluice::ThreadPool& pool, std::mt19937& rng);
void check_elementwise(const char* name, std::mt19937& rng);
void check_attn_res(const char* name, sluice::ThreadPool& pool, std::mt19937& rng);

// tests/ops/layer_op_checks.cpp: the MoE ops, MLA's absorption, RoPE's rotation (CPU)
void check_moe_ops(const char* name, sluice::ThreadPool& pool, std::mt19937& rng);
// expert_group (ctx: a CPU context): the bits of experts_one_by_one at 1, 3 and ctx's threads, every routed slot
// written and no other, near its twin; group sizes 1-16, 1-64 rows an expert, BF16/MXFP4/Q8_0/F32/INT4/FP8
void check_expert_group(const char* name, sluice::ExecContext& ctx, std::mt19937& rng);
void check_mla_ops(const char* name, sluice::ThreadPool& pool, std::mt19937& rng);
void check_rope(const char* name, std::mt19937& rng);
// tests/ops/cuda_group_checks.cpp: expert_group on the card (near its twin; an expert's bits independent of the group)
void check_cuda_expert_group(std::mt19937& rng);
// tests/ops/cuda_perf.cpp: --perf, the CUDA kernels against the card's limits
void perf(std::mt19937& rng);
inline bool g_perf_groups_only = false;  // --perf-groups: perf() times the expert groups alone
