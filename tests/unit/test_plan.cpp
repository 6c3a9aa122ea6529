// `sluice plan`'s arithmetic (plan/projection.h), its rates file (plan/rates.h) and the published shapes it plans
// for (plan/model_shape.h), on hand-made figures whose answers are worked out in the comments.
#include <gtest/gtest.h>

#include <cmath>

#include "../support/test_util.h"
#include "core/error.h"
#include "plan/cache_sim.h"
#include "plan/kernel_probe.h"
#include "plan/model_shape.h"
#include "plan/projection.h"
#include "plan/rates.h"

using namespace sluice;

namespace {

using test::error_of;

// 2 MoE layers of 4 experts (top 1) of 1 MB; 2 MB of bf16 spine matrices; no head.
ModelShape toy() {
    ModelShape m;
    m.source = "toy";
    m.n_layers = 2;
    m.n_moe_layers = 2;
    m.n_experts = 4;
    m.top_k = 1;
    m.expert_bytes = 1'000'000;
    m.expert_slot_bytes = 1'000'000;
    m.expert_format = "bf16";
    m.expert_matmuls = 3;
    m.spine_matmul_bytes["bf16"] = 2'000'000;
    m.spine_matmuls = 4;
    return m;
}

MachineRates flat_rates(double gbps) {
    MachineRates r;
    r.threads = 2;
    r.drive_gbps = gbps;
    r.kernels["bf16"] = {{1, 256}, {gbps, gbps}};
    return r;
}

}  // namespace

TEST(Plan, DistinctExperts) {
    EXPECT_DOUBLE_EQ(distinct_experts(8, 2, 1), 2.0);
    EXPECT_NEAR(distinct_experts(8, 2, 2), 8 * (1 - 0.75 * 0.75), 1e-12);  // 3.5
    EXPECT_NEAR(distinct_experts(896, 16, 256), 896 * (1 - std::pow(1 - 16.0 / 896, 256)), 1e-9);
    EXPECT_NEAR(distinct_experts(8, 2, 1000), 8.0, 1e-9);
}

TEST(Plan, SkewedHitRate) {
    EXPECT_DOUBLE_EQ(skewed_hit_rate({1, 4, 2, 3}, 2), 0.7);  // the two most used: (4 + 3) / 10
    EXPECT_DOUBLE_EQ(skewed_hit_rate({1, 1, 1, 1}, 1), 0.25);  // uniform: the cache share
    EXPECT_DOUBLE_EQ(skewed_hit_rate({1, 1}, 5), 1.0);
    EXPECT_DOUBLE_EQ(skewed_hit_rate({}, 5), 0.0);
}

TEST(Plan, KernelRateInterpolatesTimePerByte) {
    KernelRate k{{1, 4}, {4.0, 1.0}};
    EXPECT_DOUBLE_EQ(k.at(1), 4.0);
    EXPECT_DOUBLE_EQ(k.at(0.5), 4.0);  // clamped at the ends
    EXPECT_DOUBLE_EQ(k.at(100), 1.0);
    // at 2 rows, halfway in log(rows): time per byte halfway between 1/4 and 1: 0.625 -> 1.6 GB/s
    EXPECT_NEAR(k.at(2), 1.6, 1e-12);
}

TEST(Plan, DecodePass) {
    const ModelShape m = toy();
    ResidencyPlan plan;  // nothing streams
    MachineRates r = flat_rates(1.0);
    // decode: 1 distinct expert per layer, 2 in all; hit rate 0.5 -> 1 MB read -> 1 ms at 1 GB/s.
    // compute: 2 MB spine + 2 MB experts at 1 GB/s = 4 ms; I/O + compute = 5 ms -> 200 tok/s; overlapped 4 ms.
    PassProjection p = project_pass(m, plan, r, 0.5, 1.0, 1, 1, "serial");
    EXPECT_DOUBLE_EQ(p.distinct_experts, 1.0);
    EXPECT_DOUBLE_EQ(p.expert_bytes_read, 1e6);
    EXPECT_NEAR(p.io_ms, 1.0, 1e-12);
    EXPECT_NEAR(p.compute_ms, 4.0, 1e-12);
    EXPECT_NEAR(p.tok_per_s, 200.0, 1e-9);
    EXPECT_NEAR(project_pass(m, plan, r, 0.5, 1.0, 1, 1, "overlap").tok_per_s, 250.0, 1e-9);
    // a read's latency of 0.5 ms for each layer that misses at all: with h = 0.5 and one expert, half of them
    r.drive_latency_ms = 0.5;
    EXPECT_NEAR(project_pass(m, plan, r, 0.5, 1.0, 1, 1, "serial").io_ms, 1.0 + 2 * 0.5 * 0.5, 1e-12);
    // a call overhead of 100 us for each of 4 spine + 2 x 3 expert matmuls: +1 ms
    r.drive_latency_ms = 0;
    r.matmul_overhead_us = 100;
    EXPECT_NEAR(project_pass(m, plan, r, 0.5, 1.0, 1, 1, "serial").compute_ms, 5.0, 1e-12);
    // a streamed spine is read on every pass
    plan.spine_streamed_bytes = 3'000'000;
    EXPECT_NEAR(project_pass(m, plan, flat_rates(1.0), 0.5, 1.0, 1, 1, "serial").io_ms, 4.0, 1e-12);
}

TEST(Plan, PipelineTiming) {
    const ModelShape m = toy();
    const ResidencyPlan plan;
    MachineRates r = flat_rates(1.0);
    r.drive_latency_ms = 0.5;
    // nothing cached: per layer 1 miss; c_e = 1 ms, τ = 1 ms, the first miss lands after max(0.5, 1) = 1 ms:
    // layer = max(1, 1 + 1, 1 + 0 + 1) = 2 ms; pass = 2 ms of spine + 2 layers x 2 ms = 6 ms (reads alone: 2 ms)
    EXPECT_NEAR(project_pass(m, plan, r, 0.0, 1.0, 1, 1, "pipeline").pass_ms, 6.0, 1e-12);
    // serial: I/O 2 ms + 2 x 0.5 ms latency, compute 4 ms: 7 ms; overlap: 4 ms
    EXPECT_NEAR(project_pass(m, plan, r, 0.0, 1.0, 1, 1, "serial").pass_ms, 7.0, 1e-12);
    EXPECT_NEAR(project_pass(m, plan, r, 0.0, 1.0, 1, 1, "overlap").pass_ms, 4.0, 1e-12);
    // a slow drive (0.25 GB/s): τ = 4 ms; layer = max(1, 4 + 1, 4 + 0 + 1) = 5 ms: pass = 2 + 10 = 12 ms
    EXPECT_NEAR(project_pass(m, plan, r, 0.0, 0.25, 1, 1, "pipeline").pass_ms, 12.0, 1e-12);
    // everything cached: compute only, 2 + 2 x 1 = 4 ms
    EXPECT_NEAR(project_pass(m, plan, r, 1.0, 1.0, 1, 1, "pipeline").pass_ms, 4.0, 1e-12);
}

TEST(Plan, ExpertsAtTheRateOfTheirOwnShape) {
    ModelShape m = toy();
    m.expert_matrix_shapes = {{100, 300}, {100, 300}, {300, 100}};
    const ResidencyPlan plan;
    MachineRates r = flat_rates(1.0);
    // without shape rates: 2 MB spine + 2 experts x 1 MB at 1 GB/s = 4 ms
    EXPECT_NEAR(project_pass(m, plan, r, 1.0, 1.0, 1, 1, "pipeline").compute_ms, 4.0, 1e-12);
    // the short-row down projection (a third of the bytes) at 0.5 GB/s: each expert 2/3 ms + 2/3 ms = 4/3 ms
    r.kernels[kernel_shape_key("bf16", 100, 300)] = {{1}, {1.0}};
    EXPECT_NEAR(project_pass(m, plan, r, 1.0, 1.0, 1, 1, "pipeline").compute_ms, 4.0, 1e-12);  // not all shapes: format rate
    r.kernels[kernel_shape_key("bf16", 300, 100)] = {{1}, {0.5}};
    EXPECT_NEAR(project_pass(m, plan, r, 1.0, 1.0, 1, 1, "pipeline").compute_ms, 2.0 + 2 * 4.0 / 3.0, 1e-12);
}

// --gpu-memory: the card keeps the work buffers, then the resident spine's matrices in first-use order, then the
// streamed layers (only when they outlast a pass in the LRU), then experts (plan/card.h).
TEST(Plan, CardKeepsWhatFitsInOrder) {
    ModelShape m = toy();  // 2 MB of spine matrices, 2 MoE layers x 4 experts of 1 MB, top 1
    ResidencyPlan host;
    host.activation_bytes = 1'000'000;
    CardPlan c = plan_card(m, host, 10'000'000, 25.0);
    EXPECT_EQ(c.workspace_bytes, 1'000'000u);
    EXPECT_EQ(c.spine_kept_bytes, 2'000'000u);
    EXPECT_EQ(c.expert_slots, 7u);  // 10 - 1 - 2 MB
    // a decode pass uses 2 experts; half of them on the card: 1 MB crosses
    EXPECT_DOUBLE_EQ(card_link_bytes(m, c, 2.0, 0.5), 1e6);
    EXPECT_EQ(plan_card(m, host, 100'000'000, 25.0).expert_slots, 8u);  // never more than every routed expert
    // 2.5 MB: the spine's first 1.5 MB stay, the other 0.5 MB cross at every pass; no room for experts
    c = plan_card(m, host, 2'500'000, 25.0);
    EXPECT_EQ(c.spine_kept_bytes, 1'500'000u);
    EXPECT_EQ(c.expert_slots, 0u);
    EXPECT_DOUBLE_EQ(card_link_bytes(m, c, 2.0, 0.0), 0.5e6 + 2e6);
    // 3 of 5 MB of spine matrices streamed: kept when the room holds them and a decode pass's 2 experts (1 + 2 +
    // 3 + 2 = 8 MB), else they cross at every pass
    m.spine_matmul_bytes["bf16"] = 5'000'000;
    host.spine_streamed_bytes = 3'000'000;
    c = plan_card(m, host, 8'000'000, 25.0);
    EXPECT_EQ(c.spine_matrix_bytes, 2'000'000u);
    EXPECT_EQ(c.streamed_kept_bytes, 3'000'000u);
    EXPECT_EQ(c.expert_slots, 2u);
    EXPECT_DOUBLE_EQ(card_link_bytes(m, c, 2.0, 1.0), 0.0);
    c = plan_card(m, host, 7'900'000, 25.0);
    EXPECT_EQ(c.streamed_kept_bytes, 0u);
    EXPECT_EQ(c.expert_slots, 1u);  // of the 4.9 MB of room the layers' copies still take 3 MB as they pass
    EXPECT_DOUBLE_EQ(card_link_bytes(m, c, 2.0, 1.0), 3e6);
    // a budget that does not hold the work buffers names the least that would; a link rate must be a rate
    const std::string e = error_of([&] { (void)plan_card(m, host, 1'000'000, 25.0); });
    EXPECT_NE(e.find("give at least"), std::string::npos) << e;
    EXPECT_NE(error_of([&] { (void)plan_card(m, host, 10'000'000, 0.0); }).find("--link"), std::string::npos);
}

// Through project(): the drives read what they read without the card; each pass also gets its copies' bytes and
// time, and takes at least that time.
TEST(Plan, CardAddsTheLinkToEveryPass) {
    const ModelShape m = shape_from_published("mixtral");
    PlanMachine mc;
    mc.memory_bytes = uint64_t(40) << 30;
    mc.drives_gbps = {7.0};
    mc.device = "cuda";
    PlanSettings s;
    s.batch_sizes = {1, 16};
    const Projection plain = project(m, mc, s);
    EXPECT_FALSE(plain.card.has_value());
    EXPECT_EQ(plain.decode.link_bytes, 0.0);
    mc.gpu_memory_bytes = uint64_t(24) << 30;
    mc.link_gbps = 0.5;  // slow enough to bind
    const Projection p = project(m, mc, s);
    ASSERT_TRUE(p.card.has_value());
    EXPECT_DOUBLE_EQ(p.decode.expert_bytes_read, plain.decode.expert_bytes_read);
    EXPECT_GT(p.decode.link_bytes, 0.0);
    EXPECT_NEAR(p.decode.link_ms, p.decode.link_bytes / 0.5e6, 1e-6);
    EXPECT_GE(p.decode.pass_ms, p.decode.link_ms);
    EXPECT_NEAR(p.batches[1].tok_per_s, 16000.0 / p.batches[1].pass_ms, 1e-9);
    EXPECT_GT(p.decode.card_hit_rate, 0.0);
    // a card that holds every expert copies nothing once warm
    mc.gpu_memory_bytes = uint64_t(200) << 30;
    EXPECT_NEAR(project(m, mc, s).decode.link_bytes, 0.0, 1e-6);
    mc.device = "cpu";
    EXPECT_NE(error_of([&] { (void)project(m, mc, s); }).find("--gpu-memory needs --device cuda"), std::string::npos);
    mc.device = "cuda";
    mc.gpu_memory_bytes = 0;
    EXPECT_NE(error_of([&] { (void)project(m, mc, s); }).find("--link needs --gpu-memory"), std::string::npos);
}

TEST(Plan, BatchReadsEachExpertOnce) {
    const ModelShape m = toy();
    const ResidencyPlan plan;
    // 4 rows: distinct = 4 (1 - 0.75^4) = 2.734375 per layer; nothing cached: 2 x 2.734375 MB read, shared by 4 rows
    const PassProjection p = project_pass(m, plan, flat_rates(1.0), 0.0, 2.0, 4, 4, "pipeline");
    EXPECT_NEAR(p.distinct_experts, 2.734375, 1e-12);
    EXPECT_NEAR(p.bytes_read_per_token(), 2 * 2.734375e6 / 4, 1e-6);
    EXPECT_NEAR(p.io_ms, 2 * 2.734375 / 2.0, 1e-12);
}

TEST(Plan, CacheSimulationSeesTheLayerCycle) {
    // 3 MoE layers, top 16 of 32: a token touches 48 experts. With 19 slots (20%), LRU has evicted every expert of a
    // layer by the time the next token comes back to it (the other two layers' 32 came between): nothing hits.
    EXPECT_EQ(simulate_cache(3, 32, 16, {}, 19, 1, {}).hit_rate, 0.0);
    // With 48 (50%) it keeps one token's experts and no more: a hit exactly when the next token re-chooses one, 1/2.
    EXPECT_NEAR(simulate_cache(3, 32, 16, {}, 48, 1, {}).hit_rate, 0.5, 0.01);
    // the cache share would have said 20% and 50%; a cache that holds everything hits always
    EXPECT_EQ(simulate_cache(3, 32, 16, {}, 96, 1, {}).hit_rate, 1.0);
    // next-use keeps the experts of the layers coming next, so it hits where LRU cannot
    CacheSimOptions next_use;
    next_use.policy = "next-use";
    EXPECT_GT(simulate_cache(3, 32, 16, {}, 19, 1, next_use).hit_rate, 0.05);
    // LRU's recency list picks the same victims as LruPolicy's scan of every slot
    CacheSimOptions scan;
    scan.lru_through_policy = true;
    for (uint64_t slots : {5, 19, 40, 70})
        for (int64_t rows : {1, 3, 40})
            EXPECT_EQ(simulate_cache(3, 32, 4, {}, slots, rows, {}).hit_rate,
                      simulate_cache(3, 32, 4, {}, slots, rows, scan).hit_rate)
                << slots << " slots, " << rows << " rows";
    // deterministic for a seed
    EXPECT_EQ(simulate_cache(3, 32, 4, {}, 30, 2, {}).hit_rate, simulate_cache(3, 32, 4, {}, 30, 2, {}).hit_rate);
}

TEST(Plan, CacheSimulationFollowsUsageShares) {
    // one layer, top 1 of 8, one slot: LRU hits when a token chooses what the previous one did: sum of p^2
    std::vector<double> shares(8, 0.1 / 7);
    shares[3] = 0.9;
    double want = 0.81;
    for (int i = 0; i < 7; ++i) want += (0.1 / 7) * (0.1 / 7);
    EXPECT_NEAR(simulate_cache(1, 8, 1, shares, 1, 1, {}).hit_rate, want, 0.01);
    EXPECT_NEAR(simulate_cache(1, 8, 1, {}, 1, 1, {}).hit_rate, 1.0 / 8, 0.01);  // uniform: 1/8
    EXPECT_NE(error_of([] { (void)simulate_cache(2, 8, 1, std::vector<double>(8, 1.0), 1, 1, {}); })
                  .find("usage shares"),
              std::string::npos);
}

TEST(Plan, CacheReplaysATrace) {
    ExpertTrace t;
    t.header.n_layers = 2;
    t.header.n_experts = 4;
    for (uint32_t pass = 0; pass < 6; ++pass) {  // layer 1 alternates between experts 0 and 1
        TraceRecord r;
        r.pass = pass;
        r.layer = 1;
        r.top_k = 1;
        r.n_rows = 1;
        r.choices = {uint16_t(pass % 2)};
        r.distinct = {{uint16_t(pass % 2), 0}};
        t.records.push_back(r);
    }
    EXPECT_EQ(replay_cache(t, 1, 1, "lru").hit_rate, 0.0);  // one slot: always the other one
    EXPECT_EQ(replay_cache(t, 2, 1, "lru").hit_rate, 1.0);  // two: both stay after the warm-up round
    EXPECT_NE(error_of([&] { (void)replay_cache(t, 2, 4, "lru"); }).find("no pass of 4 rows"), std::string::npos);
    ModelShape m = toy();
    m.n_layers = 2;
    m.n_moe_layers = 1;
    const std::vector<double> shares = trace_usage_shares(t, m);
    EXPECT_EQ(shares, (std::vector<double>{3, 3, 0, 0}));
    EXPECT_NO_THROW(check_trace_shape(t, "t.trace", m));
    m.n_experts = 8;  // recorded on another model: the file and the field are named
    const std::string e = error_of([&] { check_trace_shape(t, "t.trace", m); });
    EXPECT_NE(e.find("t.trace"), std::string::npos) << e;
    EXPECT_NE(e.find("experts"), std::string::npos) << e;
}

TEST(Plan, ImpossibleFiguresAreErrors) {
    const ModelShape m = shape_from_published("mixtral");
    PlanMachine mc;
    mc.memory_bytes = uint64_t(64) << 30;
    EXPECT_NE(error_of([&] { (void)project(m, mc, {}); }).find("--drives"), std::string::npos);
    mc.drives_gbps = {7.0, 0.0};
    EXPECT_NE(error_of([&] { (void)project(m, mc, {}); }).find("--drives"), std::string::npos);
    mc.drives_gbps = {7.0};
    mc.memory_bytes = uint64_t(1) << 30;  // below Mixtral's spine + state: the minimum is named
    const std::string e = error_of([&] { (void)project(m, mc, {}); });
    EXPECT_NE(e.find("below the minimum working set of"), std::string::npos) << e;
    mc.memory_bytes = uint64_t(64) << 30;
    EXPECT_NO_THROW((void)project(m, mc, {}));
}

// --token-overhead-ms: compute outside the matmuls, per row, added to every timed pass (it overlaps no read).
TEST(Plan, TokenOverheadAddsPerRow) {
    const ModelShape m = shape_from_published("mixtral");
    PlanMachine mc;
    mc.memory_bytes = uint64_t(64) << 30;
    mc.drives_gbps = {7.0};
    const MachineRates rates = flat_rates(10.0);
    mc.rates = rates;
    PlanSettings s;
    s.batch_sizes = {1, 4};
    const Projection base = project(m, mc, s);
    s.token_overhead_ms = 2.5;
    const Projection more = project(m, mc, s);
    ASSERT_TRUE(base.timed);
    EXPECT_NEAR(more.decode.pass_ms - base.decode.pass_ms, 2.5, 1e-9);
    EXPECT_NEAR(more.decode.tok_per_s, 1000.0 / more.decode.pass_ms, 1e-9);
    EXPECT_NEAR(more.batches[1].pass_ms - base.batches[1].pass_ms, 4 * 2.5, 1e-9);
    EXPECT_NEAR(more.prefill.pass_ms - base.prefill.pass_ms, double(s.prefill_chunk) * 2.5, 1e-6);
    s.token_overhead_ms = -1;
    EXPECT_NE(error_of([&] { (void)project(m, mc, s); }).find("--token-overhead-ms"), std::string::npos);
    s.token_overhead_ms = 2.5;  // untimed (no rates): bytes only, no overhead
    mc.rates.reset();
    EXPECT_EQ(project(m, mc, s).decode.pass_ms, project(m, mc, PlanSettings{}).decode.pass_ms);
}

TEST(Plan, DriveRates) {
    EXPECT_DOUBLE_EQ(parse_drive_rate("7GB/s"), 7.0);
    EXPECT_DOUBLE_EQ(parse_drive_rate("7 GB/s"), 7.0);
    EXPECT_DOUBLE_EQ(parse_drive_rate("3500MB/s"), 3.5);
    EXPECT_DOUBLE_EQ(parse_drive_rate("6.5"), 6.5);
    for (const char* bad : {"0GB/s", "-7GB/s", "fast", "7XB/s", "", "nan", "inf"})
        EXPECT_NE(error_of([&] { (void)parse_drive_rate(bad); }).find("--drives"), std::string::npos) << bad;
}

TEST(Plan, RatesFileRoundTripAndErrors) {
    MachineRates r = flat_rates(2.5);
    r.drive_latency_ms = 0.2;
    r.matmul_overhead_us = 3;
    const MachineRates back = parse_rates(rates_to_json(r), "r.json");
    EXPECT_DOUBLE_EQ(back.drive_gbps, 2.5);
    EXPECT_DOUBLE_EQ(back.drive_latency_ms, 0.2);
    EXPECT_DOUBLE_EQ(back.matmul_overhead_us, 3);
    EXPECT_EQ(back.threads, 2);
    EXPECT_EQ(back.kernels.at("bf16").rows, (std::vector<int64_t>{1, 256}));
    const std::string good = R"("sluice_rates": 1, "drive_gbps": 1.5)";
    const std::string k = R"("kernels": {"bf16": {"rows": [1, 4], "gbps": [2, 1]}})";
    EXPECT_NO_THROW(parse_rates("{" + good + ", " + k + "}", "r.json"));
    const std::pair<std::string, std::string> bad[] = {
        {"not json", "not valid JSON"},
        {"[]", "not a JSON object"},
        {R"({"drive_gbps": 1, )" + k + "}", "sluice_rates"},
        {R"({"sluice_rates": 1, )" + k + "}", "drive_gbps is missing"},
        {R"({"sluice_rates": 1, "drive_gbps": 0, )" + k + "}", "drive_gbps must be a positive rate"},
        {R"({"sluice_rates": 1, "drive_gbps": -2, )" + k + "}", "drive_gbps"},
        {R"({"sluice_rates": 1, "drive_gbps": "7", )" + k + "}", "drive_gbps must be a number"},
        {"{" + good + "}", "kernels must be an object"},
        {"{" + good + R"(, "kernels": {}})", "kernels is empty"},
        {"{" + good + R"(, "kernels": {"bf16": {"rows": [4, 1], "gbps": [1, 2]}}})", "kernels.bf16.rows must be increasing"},
        {"{" + good + R"(, "kernels": {"bf16": {"rows": [1], "gbps": [0]}}})", "kernels.bf16.gbps[0]"},
        {"{" + good + R"(, "kernels": {"bf16": {"rows": [1, 2], "gbps": [1]}}})", "same length"},
        {"{" + good + R"(, "kernels": {"bf16": {"rows": [0], "gbps": [1]}}})", "kernels.bf16.rows[0]"},
        {"{" + good + R"(, "device": "tpu", )" + k + "}", "device must be cpu or cuda"},
        {"{" + good + R"(, "threads": 0, )" + k + "}", "threads must be a positive integer"},
        {"{" + good + R"(, "drive_latency_ms": -1, )" + k + "}", "drive_latency_ms must be >= 0"},
    };
    for (const auto& c : bad) {  // not a structured binding: clang 14 cannot capture one in the lambda
        const std::string& text = c.first;
        const std::string& want = c.second;
        const std::string e = error_of([&] { (void)parse_rates(text, "r.json"); });
        EXPECT_NE(e.find("r.json"), std::string::npos) << text;
        EXPECT_NE(e.find(want), std::string::npos) << text << " -> " << e;
    }
}

TEST(Plan, PublishedKimiK3) {
    const ModelShape m = shape_from_published("kimi-k3");
    EXPECT_EQ(m.n_layers, 93);
    EXPECT_EQ(m.n_moe_layers, 92);  // layer 0 is dense
    EXPECT_EQ(m.n_experts, 896);
    EXPECT_EQ(m.top_k, 16);
    EXPECT_EQ(m.expert_format, "mxfp4");
    // w1, w3 [3072, 3584] and w2 [3584, 3072] in E2M1 (half a byte each) plus one E8M0 scale per 32
    EXPECT_EQ(m.expert_bytes, uint64_t(3) * 3072 * 3584 / 2 + uint64_t(3) * 3072 * 3584 / 32);  // 17,547,264
    // the research digest's non-expert parameters: 56.74 B in BF16 = 113.5 GB
    EXPECT_NEAR(double(m.spine_bytes), 113.5e9, 0.01 * 113.5e9);
    EXPECT_NE(error_of([] { (void)shape_from_published("kimi-k9"); }).find("--like"), std::string::npos);
}
