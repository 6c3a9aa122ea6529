// `sluice plan` must print the engine's memory plan: the plan made from a model's shape (tensor headers and
// config.json only) equals the one the engine makes when it loads the model with that budget, on every fixture
// architecture and the shipped trained model, at budgets that give a small and a large expert cache and one that
// streams the spine.
#include <gtest/gtest.h>

#include <cctype>

#include "core/error.h"
#include "models/model.h"
#include "plan/model_shape.h"
#include "plan/projection.h"

using namespace sluice;

namespace {
const std::string kData = std::string(SLUICE_TEST_DATA_DIR);

class PlanShape : public ::testing::TestWithParam<std::string> {};

void expect_same_plan(const std::string& dir, const ModelShape& m, uint64_t budget) {
    SCOPED_TRACE(dir + " budget " + std::to_string(budget));
    LoadOptions lo;
    lo.memory_budget_bytes = budget;
    lo.n_threads = 1;
    auto model = load_model(dir, lo);
    const ResidencyPlan* engine = model->residency();
    ASSERT_NE(engine, nullptr);
    PlanMachine mc;
    mc.memory_bytes = budget;
    mc.drives_gbps = {1.0};
    PlanSettings s;
    s.ctx = lo.max_context_tokens;
    s.parallel = lo.max_sequences;
    s.pass_rows = lo.max_pass_rows;
    const Projection p = project(m, mc, s);
    EXPECT_EQ(p.plan.spine_bytes, engine->spine_bytes);
    EXPECT_EQ(p.plan.spine_fixed_bytes, engine->spine_fixed_bytes);
    EXPECT_EQ(p.plan.layer_bytes, engine->layer_bytes);
    EXPECT_EQ(p.plan.first_streamed_layer, engine->first_streamed_layer);
    EXPECT_EQ(p.plan.spine_streamed_bytes, engine->spine_streamed_bytes);
    EXPECT_EQ(p.plan.state_bytes, engine->state_bytes);
    EXPECT_EQ(p.plan.staging_bytes, engine->staging_bytes);
    EXPECT_EQ(p.plan.expert_cache_bytes, engine->expert_cache_bytes);
    const auto* st = model->streaming();
    ASSERT_NE(st, nullptr);
    EXPECT_EQ(m.expert_bytes, model->info().expert_bytes);
    EXPECT_EQ(m.n_moe_layers, model->info().n_moe_layers);
    EXPECT_EQ(p.cache_slots, st->cache().n_slots());
    EXPECT_TRUE(*m.state == model->new_sequence()->layout());
}
}  // namespace

TEST_P(PlanShape, SameAsEngine) {
    const std::string dir = kData + "/" + GetParam();
    const ModelShape m = shape_from_folder(dir);
    PlanMachine mc;
    mc.memory_bytes = uint64_t(1) << 40;
    mc.drives_gbps = {1.0};
    PlanSettings engine_rows;  // the engine's default pass, as expect_same_plan loads it
    engine_rows.pass_rows = LoadOptions{}.max_pass_rows;
    const Projection big = project(m, mc, engine_rows);
    const uint64_t min = big.plan.min_bytes();
    const uint64_t all_slots = uint64_t(m.n_moe_layers * m.n_experts) * m.expert_slot_bytes;
    expect_same_plan(dir, m, min + all_slots / 5);
    expect_same_plan(dir, m, min + all_slots * 4 / 5);
    // below the whole spine: the last layers' matrices stream (the first split that saves memory, as the engine
    // keeps as many leading layers resident as fit)
    const auto& lb = m.layer_read_bytes;
    for (size_t k = lb.size(); k-- > 0;) {
        uint64_t streamed = 0, largest = 0;
        for (size_t l = k; l < lb.size(); ++l) streamed += lb[l], largest = std::max(largest, lb[l]);
        if (2 * largest + 16384 < streamed) {
            expect_same_plan(dir, m, min - streamed + 2 * largest + 8192);
            break;
        }
    }
    // a budget below the working set is refused, naming the minimum, as the engine refuses it
    mc.memory_bytes = m.spine_fixed_bytes / 2 + 1;
    try {
        (void)project(m, mc, PlanSettings{});
        ADD_FAILURE() << "no error for a budget below the working set";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("minimum working set"), std::string::npos) << e.what();
    }
}

// Folders under tests/data (the trained model under the repository's models/).
INSTANTIATE_TEST_SUITE_P(Fixtures, PlanShape,
                         ::testing::Values("fixtures/dsv3_qlora_group_yarn", "fixtures/dsv3_fp8_block128",
                                           "fixtures/k2_thinking_int4", "fixtures/dsv3_fused_experts",
                                           "fixtures/kimi_k3_attnres_mxfp4", "fixtures/kimi_linear_qlora_groups",
                                           "fixtures/qwen3_moe_norm_dense", "fixtures/mixtral_hub",
                                           "fixtures/gpt_oss_swa_sinks_mxfp4", "fixtures/tied_head",
                                           "../../models/sluice-k2-tiny"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                             std::string name = info.param.substr(info.param.rfind('/') + 1);
                             for (char& c : name)
                                 if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                             return name;
                         });
