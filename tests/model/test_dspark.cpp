// Kimi K3's DSpark drafter (models/dspark.h, runtime/dspark_drafter.h) on a synthesized K3 target and a DSpark
// checkpoint synthesized for it (synth --like kimi-k3-dspark --target): the published layout; greedy output with
// DSpark drafts equal to plain greedy (the target verifies); the tap rows the engine leaves (drafts, rollbacks,
// KDA replay) equal a clean prefill's; the drafter's pass is deterministic, and a causal mask or wrong taps change
// it; load errors name the field or tensor. SLUICE_DSPARK_DUMP=DIR (with SLUICE_KEEP_TEST_DIRS=1, so the checkpoints
// stay) also writes what tools/reference/dspark_reference.py needs to recompute the draft logits independently.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/npy.h"
#include "formats/checkpoint.h"
#include "models/dspark.h"
#include "models/model.h"
#include "models/synth.h"
#include "models/synth_roster.h"
#include "models/weights.h"
#include "runtime/draft_gate.h"
#include "runtime/dspark_drafter.h"
#include "runtime/generate.h"
#include "runtime/speculative.h"
#include "../support/k3_drafter.h"
#include "../support/reference_decode.h"

using namespace sluice;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const test::K3DrafterDirs& dirs() {
    static const test::K3DrafterDirs d = test::make_k3_drafter("dspark", "kimi-k3-dspark", 5, 11);
    return d;
}

fs::path edited(const std::string& name, const std::function<void(json&)>& f) {
    return test::edited_drafter(dirs(), name, f);
}

std::string load_error(const fs::path& dir) { return test::drafter_load_error<DSparkModel>(dirs(), dir); }

}  // namespace

TEST(DSpark, SynthWritesThePublishedLayout) {
    const json c = json::parse(std::ifstream(dirs().drafter / "config.json"));
    EXPECT_EQ(c["architectures"], json::array({"K3DSparkModel"}));
    EXPECT_EQ(c["model_type"], "k3_dspark");
    EXPECT_EQ(c["target_layer_ids"], json::array({0, 1, 2, 3, 4}));  // [2,23,47,71,89] of 93 mapped onto 5
    EXPECT_EQ(c["mask_token_id"], int64_t(c["vocab_size"]) - 3);
    EXPECT_EQ(c["rope_scaling"]["type"], "yarn");
    EXPECT_TRUE(c["enable_confidence_head"].get<bool>() && c["confidence_head_with_markov"].get<bool>());
    Checkpoint ck(dirs().drafter.string());
    EXPECT_EQ(ck.names().size(), 68u);  // as the release, for 5 layers
    const int64_t h = c["hidden_size"], V = c["vocab_size"], r = c["markov_rank"];
    EXPECT_EQ(ck.get("context_proj.weight").shape(), (std::vector<int64_t>{h, 5 * h}));
    EXPECT_EQ(ck.get("confidence_head.proj.weight").shape(), (std::vector<int64_t>{1, h + r}));
    EXPECT_EQ(ck.get("markov_head.markov_w2.weight").shape(), (std::vector<int64_t>{V, r}));
    for (const char* n : {"layers.4.self_attn.kv_a_proj_with_mqa.weight", "layers.4.mlp.down_proj.weight",
                          "final_norm.weight", "context_norm.weight", "confidence_head.proj.bias"})
        EXPECT_TRUE(ck.has(n)) << n;
    // embed_tokens is the target's, byte for byte
    Checkpoint t(dirs().target.string());
    const TensorView a = ck.get("embed_tokens.weight"), b = t.get("language_model.model.embed_tokens.weight");
    ASSERT_EQ(a.nbytes(), b.nbytes());
    EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes()), 0);
    // the tap mapping keeps the release's ids on a 93-layer target
    EXPECT_EQ(synth::dspark_target_layer_ids(93), (std::vector<int64_t>{2, 23, 47, 71, 89}));
}

// The target verifies every draft: greedy output with DSpark drafts is the plain greedy output, token for token.
TEST(DSpark, GreedySameAsPlain) {
    auto model = load_model(dirs().target.string());
    DSparkDrafter ds(dirs().drafter.string(), *model);
    test::expect_greedy_same_as_plain(*model, [&] { return ds.drafter(); });
    EXPECT_EQ(ds.stats().no_taps, 0);
}

// With the confidence cut on (the draft gate's per-block part), a block keeps exactly the prefix confidence_cut
// chooses from the block's own confidences and the target's pass bytes, and greedy output is still plain greedy.
// Its own target has 128 experts (top 16), so each draft row adds experts to a pass (the shared fixture's 4 experts are
// all used by every row, which makes every draft free).
TEST(DSpark, ConfidenceCutKeepsThePrefixThatPays) {
    const fs::path root = test::scratch_dir("dspark_cut"), target = root / "k3", drafter = root / "dspark";
    synth_checkpoint({.like = "kimi-k3", .layers = 3, .experts = 128, .scale_down = 32, .seed = 7,
                      .out_dir = target.string(), .sync = false});
    synth_checkpoint({.like = "kimi-k3-dspark", .layers = 2, .scale_down = 32, .seed = 11,
                      .out_dir = drafter.string(), .target_dir = target.string(), .sync = false});
    auto model = load_model(target.string());
    const DraftCost cost = draft_cost(*model, 0);
    ASSERT_GT(cost.pass_bytes(2), 1.2 * cost.pass_bytes(1));
    auto dm = DSparkModel::load(drafter.string(), *model);
    model->set_hidden_taps(dm->config().target_layer_ids);
    const auto ids = test::drafter_prompt();
    const int64_t W = dm->config().context_width(), B = dm->config().block_size;
    const auto s = test::prefill(*model, std::span<const int32_t>(ids).first(ids.size() - 1));
    std::vector<float> rows(size_t(s->taps().rows() * W));
    for (int64_t t = 0; t < s->taps().rows(); ++t) std::copy_n(s->taps().row(t), W, rows.data() + t * W);
    auto seq = dm->new_seq();
    dm->ingest(seq, rows.data(), s->taps().rows());
    const auto block = dm->propose(seq, ids.back(), B);
    ASSERT_EQ(block.confidence.size(), size_t(B));
    const int64_t keep = confidence_cut(cost, block.confidence);
    EXPECT_LT(keep, B) << "on this model some draft should not pay for its row (else the cut is not exercised)";

    // a pick chooses each draft, and the Markov head conditions the next row on that choice
    std::vector<int32_t> picked;
    const DraftPick pick_five = [&](std::span<const float> logits, std::span<const int64_t> offsets) {
        EXPECT_EQ(logits.size(), size_t(dm->config().vocab_size));
        EXPECT_TRUE(offsets.empty());
        picked.push_back(5);
        return 5;
    };
    auto seq5 = dm->new_seq();
    dm->ingest(seq5, rows.data(), s->taps().rows());
    const auto fives = dm->propose(seq5, ids.back(), B, &pick_five);
    EXPECT_EQ(fives.drafts, picked);
    EXPECT_EQ(fives.drafts, std::vector<int32_t>(size_t(B), 5));
    const size_t V = size_t(dm->config().vocab_size);
    ASSERT_NE(block.drafts[0], 5) << "pick another token for this model";
    EXPECT_TRUE(std::equal(fives.logits.begin(), fives.logits.begin() + ptrdiff_t(V), block.logits.begin()));
    EXPECT_FALSE(std::equal(fives.logits.begin() + ptrdiff_t(V), fives.logits.begin() + ptrdiff_t(2 * V),
                            block.logits.begin() + ptrdiff_t(V)));

    DSparkDrafter whole(drafter.string(), *model), cut(drafter.string(), *model);
    ASSERT_TRUE(cut.has_confidence_head());
    cut.set_confidence_cut(true);
    EXPECT_EQ(whole.drafter()(ids, B, s.get(), nullptr), block.drafts);
    EXPECT_EQ(cut.drafter()(ids, B, s.get(), nullptr), std::vector<int32_t>(block.drafts.begin(), block.drafts.begin() + keep));
    EXPECT_EQ(cut.stats().cut, B - keep);
    EXPECT_EQ(whole.stats().cut, 0);

    const auto ref = test::reference_generate(*model, ids, 40, false);
    GenerateOptions g;
    g.max_new_tokens = 40;
    g.stop_at_eos = false;
    SpeculativeOptions so;
    so.draft_tokens = B;
    so.drafter = cut.drafter();
    EXPECT_EQ(generate_speculative(*model, ids, g, so).ids, ref.ids);
    EXPECT_GT(cut.stats().cut, B - keep);  // it cut blocks during generation too
}

// The drafter sees, at every call, the tap rows a clean prefill of the same tokens gives (the engine's drafts,
// rollbacks and KDA replays leave exactly the kept rows), and its incremental context (what was accepted extends
// it) drafts what a fresh drafter given the whole context drafts.
TEST(DSpark, EngineTapsAndIncrementalContextMatchAFreshPrefill) {
    auto model = load_model(dirs().target.string());
    auto clean = load_model(dirs().target.string());
    DSparkDrafter ds(dirs().drafter.string(), *model);
    DSparkDrafter fresh(dirs().drafter.string(), *clean);
    Drafter kept = ds.drafter();
    int64_t calls = 0;
    SpeculativeOptions so;
    so.draft_tokens = 5;
    so.drafter = [&](std::span<const int32_t> ctx, int64_t max, const SequenceState* target, const DraftPick*) {
        const auto d = kept(ctx, max, target, nullptr);
        const auto s = test::prefill(*clean, ctx.first(ctx.size() - 1));
        EXPECT_EQ(target->taps().rows(), int64_t(ctx.size()) - 1);
        for (int64_t t = 0; t < s->taps().rows(); ++t)
            EXPECT_EQ(std::memcmp(s->taps().row(t), target->taps().row(t), size_t(s->taps().width()) * 4), 0)
                << "tap row " << t;
        EXPECT_EQ(fresh.drafter()(ctx, max, s.get(), nullptr), d) << "context of " << ctx.size();
        ++calls;
        return d;
    };
    GenerateOptions g;
    g.max_new_tokens = 24;
    g.stop_at_eos = false;
    generate_speculative(*model, test::drafter_prompt(), g, so);
    EXPECT_GT(calls, 3);
}

// The block pass is deterministic; a causal mask inside the block or the wrong tapped layers change it.
TEST(DSpark, DeterministicAndSensitiveToMaskAndTaps) {
    auto model = load_model(dirs().target.string());
    auto dm = DSparkModel::load(dirs().drafter.string(), *model);
    const auto ids = test::drafter_prompt();
    const int64_t W = dm->config().context_width(), B = dm->config().block_size;
    const auto run = [&](const std::vector<int64_t>& taps, bool causal) {
        model->set_hidden_taps(taps);
        const auto s = test::prefill(*model, std::span<const int32_t>(ids).first(ids.size() - 1));
        EXPECT_EQ(s->taps().width(), W);
        std::vector<float> rows(size_t(s->taps().rows() * W));
        for (int64_t t = 0; t < s->taps().rows(); ++t) std::copy_n(s->taps().row(t), W, rows.data() + t * W);
        auto seq = dm->new_seq();
        dm->ingest(seq, rows.data(), s->taps().rows());
        auto b = dm->propose(seq, ids.back(), B, nullptr, causal);
        EXPECT_EQ(seq.rows(), s->taps().rows());  // the block's rows are gone again
        const char* dump = std::getenv("SLUICE_DSPARK_DUMP");
        if (dump && !causal && taps == dm->config().target_layer_ids) {
            fs::create_directories(dump);
            npy_write_f32((fs::path(dump) / "taps.npy").string(), rows.data(), {s->taps().rows(), W});
            npy_write_f32((fs::path(dump) / "logits.npy").string(), b.logits.data(), {B, dm->config().vocab_size});
            npy_write_f32((fs::path(dump) / "confidence.npy").string(), b.confidence.data(), {B});
            std::ofstream(fs::path(dump) / "meta.json")
                << json{{"anchor", ids.back()}, {"drafts", b.drafts}, {"dspark", fs::absolute(dirs().drafter)},
                        {"target", fs::absolute(dirs().target)}}.dump(2);
        }
        return b;
    };
    const auto& good = dm->config().target_layer_ids;
    const auto a = run(good, false), b = run(good, false);
    ASSERT_EQ(a.drafts.size(), size_t(B));
    EXPECT_EQ(a.drafts, b.drafts);
    EXPECT_EQ(std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * 4), 0);
    EXPECT_EQ(a.confidence, b.confidence);
    for (float c : a.confidence) EXPECT_TRUE(c > 0 && c < 1);
    const auto max_diff = [](const DSparkModel::Block& x, const DSparkModel::Block& y) {
        double m = 0;
        for (size_t i = 0; i < x.logits.size(); ++i) m = std::max(m, double(std::fabs(x.logits[i] - y.logits[i])));
        return m;
    };
    // a causal mask: row 0 sees no mask rows, so row 0 could only agree if the block's other rows did not matter
    const auto causal = run(good, true);
    EXPECT_GT(max_diff(a, causal), 1e-3);
    EXPECT_NE(a.drafts, causal.drafts);
    // the wrong taps: each layer's tap moved one layer on (the last one back)
    std::vector<int64_t> wrong = good;
    for (auto& t : wrong) t = t + 1 < model->info().num_hidden_layers ? t + 1 : t - 1;
    const auto off = run(wrong, false);
    EXPECT_GT(max_diff(a, off), 1e-3);
    EXPECT_NE(a.drafts, off.drafts);
}

// What is tapped: the raw running sum after the layer. On this target (5 layers, AttnRes blocks of 12) the only
// block snapshot is the embedding, so the logits are lm_head(norm(AttnRes([embedding, p_last]))) with p_last the
// last layer's tap: recomputing them here from the tap checks that it is the sum after the layer's FFN, unblended.
TEST(DSpark, LastLayerTapReproducesTheLogits) {
    auto model = load_model(dirs().target.string());
    const int64_t n_layers = model->info().num_hidden_layers, d = model->info().hidden_size;
    const int64_t V = model->info().vocab_size;
    model->set_hidden_taps({n_layers - 1});
    const auto ids = test::drafter_prompt();
    auto seq = model->new_sequence();
    SequenceState* seqs[] = {seq.get()};
    Batch b;
    for (size_t i = 0; i < ids.size(); ++i) b.add(ids[i], int64_t(i), 0, true);
    std::vector<float> logits;
    model->forward(*make_exec_context(*model), b, seqs, logits);
    Checkpoint ck(dirs().target.string());
    const std::string g = "language_model.model.";
    const auto embed = load_f32(ck, g + "embed_tokens.weight", {V, d});
    const auto head = load_f32(ck, "language_model.lm_head.weight", {V, d});
    const auto norm = load_f32(ck, g + "norm.weight", {d});
    const auto res_norm = load_f32(ck, g + "output_attn_res_norm.weight", {d});
    const auto res_proj = load_f32(ck, g + "output_attn_res_proj.weight", {1, d});
    double worst = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
        const float* v[2] = {embed.data() + size_t(ids[i]) * size_t(d), seq->taps().row(int64_t(i))};
        double score[2];
        for (int j = 0; j < 2; ++j) {
            double dot = 0, ss = 0;
            for (int64_t k = 0; k < d; ++k) {
                dot += double(v[j][k]) * res_norm[size_t(k)] * res_proj[size_t(k)];
                ss += double(v[j][k]) * v[j][k];
            }
            score[j] = dot / std::sqrt(ss / double(d) + 1e-5);
        }
        const double m = std::max(score[0], score[1]);
        const double p0 = std::exp(score[0] - m) / (std::exp(score[0] - m) + std::exp(score[1] - m));
        std::vector<double> out(static_cast<size_t>(d));
        double ss = 0;
        for (int64_t k = 0; k < d; ++k) {
            out[size_t(k)] = p0 * v[0][k] + (1 - p0) * v[1][k];
            ss += out[size_t(k)] * out[size_t(k)];
        }
        const double r = 1.0 / std::sqrt(ss / double(d) + 1e-5);
        double big = 0, diff = 0;
        for (int64_t t = 0; t < V; ++t) {
            double z = 0;
            for (int64_t k = 0; k < d; ++k) z += head[size_t(t * d + k)] * out[size_t(k)] * r * norm[size_t(k)];
            big = std::max(big, std::fabs(z));
            diff = std::max(diff, std::fabs(z - logits[i * size_t(V) + size_t(t)]));
        }
        worst = std::max(worst, diff / big);
    }
    EXPECT_LT(worst, 1e-4);
}

TEST(DSpark, LoadErrorsNameTheField) {
    EXPECT_EQ(load_error(dirs().drafter), "");
    EXPECT_NE(load_error(edited("ids", [](json& c) { c["target_layer_ids"] = {0, 1, 5}; }))
                  .find("field 'target_layer_ids' entry 5 is outside the target's layers [0, 5)"),
              std::string::npos);
    EXPECT_NE(load_error(edited("hidden", [](json& c) { c["hidden_size"] = int64_t(c["hidden_size"]) + 32; }))
                  .find("field 'hidden_size'"),
              std::string::npos);
    EXPECT_NE(load_error(edited("target_hidden", [](json& c) { c["target_hidden_size"] = 7168; }))
                  .find("field 'target_hidden_size' 7168"),
              std::string::npos);
    EXPECT_NE(load_error(edited("vocab", [](json& c) { c["vocab_size"] = 163840; })).find("field 'vocab_size' 163840"),
              std::string::npos);
    EXPECT_NE(load_error(edited("mask", [](json& c) { c["mask_token_id"] = 163837; })).find("field 'mask_token_id'"),
              std::string::npos);
    // one layer more than the file holds: the first missing tensor is named
    EXPECT_NE(load_error(edited("layers", [](json& c) { c["num_hidden_layers"] = 6; }))
                  .find("tensor 'layers.5.input_layernorm.weight' not found"),
              std::string::npos);
    EXPECT_TRUE(is_dspark_checkpoint(dirs().drafter.string()));
    EXPECT_FALSE(is_dspark_checkpoint(dirs().target.string()));
    auto target = load_model(dirs().target.string());
    EXPECT_THROW(target->set_hidden_taps({0, 5}), Error);
}
