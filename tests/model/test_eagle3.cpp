// Kimi K3's EAGLE-3 drafter (models/eagle3.h, runtime/eagle3_drafter.h) on a synthesized K3 target and an EAGLE-3
// checkpoint synthesized for it (synth --like kimi-k3-eagle3 --target): the published layout; greedy output with
// EAGLE-3 drafts equal to plain greedy (the target verifies); the drafter's cache, kept across calls and cut back
// after rejections, drafts what a fresh drafter given the whole context drafts; its chain is deterministic and
// reads the taps (wrong taps change it); load errors name the field or tensor; a reduced head maps its ids through
// d2t. SLUICE_EAGLE3_DUMP=DIR (with SLUICE_KEEP_TEST_DIRS=1, so the checkpoints stay) also writes what
// tools/reference/eagle3_reference.py needs to recompute the draft logits independently (DIR_d2t: the reduced head).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/npy.h"
#include "formats/checkpoint.h"
#include "models/eagle3.h"
#include "models/model.h"
#include "models/synth.h"
#include "models/synth_roster.h"
#include "runtime/eagle3_drafter.h"
#include "runtime/sampler.h"
#include "runtime/generate.h"
#include "runtime/speculative.h"
#include "../support/k3_drafter.h"
#include "../support/reference_decode.h"

using namespace sluice;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const test::K3DrafterDirs& dirs() {
    static const test::K3DrafterDirs d = test::make_k3_drafter("eagle3", "kimi-k3-eagle3", 1, 13);
    return d;
}

fs::path edited(const std::string& name, const std::function<void(json&)>& f) {
    return test::edited_drafter(dirs(), name, f);
}

std::string load_error(const fs::path& dir) { return test::drafter_load_error<Eagle3Model>(dirs(), dir); }

}  // namespace

TEST(Eagle3, SynthWritesThePublishedLayout) {
    const json c = json::parse(std::ifstream(dirs().drafter / "config.json"));
    EXPECT_EQ(c["architectures"], json::array({"Eagle3DeepseekV2ForCausalLM"}));
    EXPECT_EQ(c["num_hidden_layers"], 1);
    EXPECT_EQ(c["eagle_config"]["eagle_aux_hidden_state_layer_ids"], json::array({1, 3, 5}));  // [2,46,90] on 5
    EXPECT_TRUE(c["fc_norm"].get<bool>() && c["norm_output"].get<bool>());
    EXPECT_EQ(c["draft_vocab_size"], c["vocab_size"]);
    Checkpoint ck(dirs().drafter.string());
    EXPECT_EQ(ck.names().size(), 20u);  // the release's 19 and the copy of the target's embedding
    const int64_t h = c["hidden_size"], V = c["vocab_size"], q = c["q_lora_rank"];
    const int64_t cw = int64_t(c["kv_lora_rank"]) + int64_t(c["qk_rope_head_dim"]);
    EXPECT_EQ(ck.get("fc.weight").shape(), (std::vector<int64_t>{h, 3 * h}));
    EXPECT_EQ(ck.get("layers.0.self_attn.q_a_proj.weight").shape(), (std::vector<int64_t>{q, 2 * h}));
    EXPECT_EQ(ck.get("layers.0.self_attn.kv_a_proj_with_mqa.weight").shape(), (std::vector<int64_t>{cw, 2 * h}));
    EXPECT_EQ(ck.get("layers.0.self_attn.o_proj.weight").shape()[0], h);
    EXPECT_EQ(ck.get("lm_head.weight").shape(), (std::vector<int64_t>{V, h}));
    for (const char* n : {"fc_norm.0.weight", "fc_norm.2.weight", "layers.0.hidden_norm.weight",
                          "layers.0.input_layernorm.weight", "layers.0.post_attention_layernorm.weight",
                          "layers.0.mlp.down_proj.weight", "norm.weight"})
        EXPECT_TRUE(ck.has(n)) << n;
    Checkpoint t(dirs().target.string());
    const TensorView a = ck.get("embed_tokens.weight"), b = t.get("language_model.model.embed_tokens.weight");
    ASSERT_EQ(a.nbytes(), b.nbytes());
    EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes()), 0);
    // the mapping keeps the release's ids on a 93-layer target
    EXPECT_EQ(synth::eagle3_aux_layer_ids(93), (std::vector<int64_t>{2, 46, 90}));
    EXPECT_TRUE(is_eagle3_checkpoint(dirs().drafter.string()));
    EXPECT_FALSE(is_eagle3_checkpoint(dirs().target.string()));
}

// The target verifies every draft: greedy output with EAGLE-3 drafts is the plain greedy output, token for token.
TEST(Eagle3, GreedySameAsPlain) {
    auto model = load_model(dirs().target.string());
    Eagle3Drafter ed(dirs().drafter.string(), *model);
    test::expect_greedy_same_as_plain(*model, [&] { return ed.drafter(); });
    EXPECT_EQ(ed.stats().no_taps, 0);
}

// The drafter's cache, kept across calls (rows added for what the target accepted, cut back where the context
// changed), drafts at every call what a fresh drafter given the whole context drafts. The engine is handed the true
// continuation instead (its last token wrong every other call), so that drafts are accepted, several tokens at a
// time, and rejected: random weights would have every draft rejected.
TEST(Eagle3, IncrementalCacheMatchesAFreshDrafter) {
    auto model = load_model(dirs().target.string());
    auto clean = load_model(dirs().target.string());
    const auto p = test::drafter_prompt();
    std::vector<int32_t> truth = p;
    for (int32_t t : test::reference_generate(*model, p, 32, false).ids) truth.push_back(t);
    Eagle3Drafter ed(dirs().drafter.string(), *model);
    Eagle3Drafter fresh(dirs().drafter.string(), *clean);
    Drafter kept = ed.drafter();
    int64_t calls = 0;
    SpeculativeOptions so;
    so.draft_tokens = 4;
    so.gate = false;
    so.drafter = [&](std::span<const int32_t> ctx, int64_t max, const SequenceState* target, const DraftPick*) {
        const auto d = kept(ctx, max, target, nullptr);
        const auto s = test::prefill(*clean, ctx.first(ctx.size() - 1));
        EXPECT_EQ(fresh.drafter()(ctx, max, s.get(), nullptr), d) << "context of " << ctx.size();
        ++calls;
        std::vector<int32_t> oracle;
        for (size_t i = ctx.size(); i < truth.size() && int64_t(oracle.size()) < max; ++i) oracle.push_back(truth[i]);
        if (calls % 2 == 0 && !oracle.empty()) oracle.back() = (oracle.back() + 1) % 256;
        return oracle;
    };
    GenerateOptions g;
    g.max_new_tokens = 32;
    g.stop_at_eos = false;
    SpeculativeStats st;
    const GenerateResult r = generate_speculative(*model, p, g, so, &st);
    EXPECT_EQ(r.ids, std::vector<int32_t>(truth.begin() + int64_t(p.size()), truth.end()));
    EXPECT_GT(calls, 3);
    EXPECT_GT(st.accepted, calls);                           // several tokens accepted per call
    EXPECT_LT(st.accepted, st.drafted);                      // and some rejected
    EXPECT_LT(ed.stats().ingested, fresh.stats().ingested);  // the kept cache was reused
    // a context that changed inside, not only grew (token 28 of 30): row 27 pairs the taps at 27 with token 28, so
    // rows 27 and 28 are made again, and the drafts are a fresh drafter's
    std::vector<int32_t> other(truth.begin(), truth.begin() + 30);
    other[28] = (other[28] + 1) % 256;
    const int64_t before = ed.stats().ingested;
    const auto mine = kept(other, 4, test::prefill(*model, std::span<const int32_t>(other).first(29)).get(), nullptr);
    EXPECT_EQ(ed.stats().ingested - before, 2);
    EXPECT_EQ(mine, fresh.drafter()(other, 4, test::prefill(*clean, std::span<const int32_t>(other).first(29)).get(), nullptr));
}

// The chain is deterministic and reads the taps: moving every tap one layer changes its logits and drafts.
TEST(Eagle3, DeterministicAndSensitiveToTaps) {
    auto model = load_model(dirs().target.string());
    auto em = Eagle3Model::load(dirs().drafter.string(), *model);
    const auto ids = test::drafter_prompt();
    const int64_t W = em->config().tap_width(), L = int64_t(ids.size()) - 1, N = 7;
    const auto run = [&](const std::vector<int64_t>& layers) {
        model->set_hidden_taps(layers);
        const auto s = test::prefill(*model, std::span<const int32_t>(ids).first(size_t(L)));
        EXPECT_EQ(s->taps().width(), W);
        std::vector<float> rows(size_t(L * W));
        for (int64_t t = 0; t < L; ++t) std::copy_n(s->taps().row(t), W, rows.data() + t * W);
        auto seq = em->new_seq();
        auto ch = em->propose(seq, rows.data(), ids.data() + 1, L, N);
        EXPECT_EQ(seq.rows(), L);  // the chain's rows are gone again
        const char* dump = std::getenv("SLUICE_EAGLE3_DUMP");
        if (dump && layers == em->config().tapped_layers()) {
            fs::create_directories(dump);
            npy_write_f32((fs::path(dump) / "taps.npy").string(), rows.data(), {L, W});
            npy_write_f32((fs::path(dump) / "logits.npy").string(), ch.logits.data(), {N, em->config().draft_vocab_size});
            std::ofstream(fs::path(dump) / "meta.json")
                << json{{"tokens", ids}, {"drafts", ch.drafts}, {"eagle3", fs::absolute(dirs().drafter)},
                        {"target", fs::absolute(dirs().target)}}.dump(2);
        }
        return ch;
    };
    const auto good = em->config().tapped_layers();
    EXPECT_EQ(good, (std::vector<int64_t>{0, 2, 4}));
    const auto a = run(good), b = run(good);
    ASSERT_EQ(a.drafts.size(), size_t(N));
    EXPECT_EQ(a.drafts, b.drafts);
    EXPECT_EQ(std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * 4), 0);
    std::vector<int64_t> wrong = good;
    for (auto& t : wrong) t = t + 1 < model->info().num_hidden_layers ? t + 1 : t - 1;
    const auto off = run(wrong);
    double m = 0;
    for (size_t i = 0; i < a.logits.size(); ++i) m = std::max(m, double(std::fabs(a.logits[i] - off.logits[i])));
    EXPECT_GT(m, 1e-3);
    EXPECT_NE(a.drafts, off.drafts);
}

TEST(Eagle3, LoadErrorsNameTheField) {
    EXPECT_EQ(load_error(dirs().drafter), "");
    const auto ids = [](std::vector<int64_t> v) {
        return [v](json& c) { c["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = v; };
    };
    EXPECT_NE(load_error(edited("ids_high", ids({1, 3, 6})))
                  .find("field 'eagle_config.eagle_aux_hidden_state_layer_ids' entry 6 is outside the target's "
                        "layers [1, 5]"),
              std::string::npos);
    EXPECT_NE(load_error(edited("ids_zero", ids({0, 3, 5}))).find("eagle_aux_hidden_state_layer_ids' entry 0"),
              std::string::npos);
    // two taps: the fc's 3 x hidden inputs no longer fit; the count field disagrees first
    EXPECT_NE(load_error(edited("ids_two", ids({1, 3}))).find("field 'num_aux_hidden_states' 3 differs"),
              std::string::npos);
    EXPECT_NE(load_error(edited("ids_missing", [](json& c) { c.erase("eagle_config"); }))
                  .find("field 'eagle_config.eagle_aux_hidden_state_layer_ids' is missing"),
              std::string::npos);
    EXPECT_NE(load_error(edited("hidden", [](json& c) { c["hidden_size"] = int64_t(c["hidden_size"]) + 32; }))
                  .find("field 'hidden_size'"),
              std::string::npos);
    EXPECT_NE(load_error(edited("target_hidden", [](json& c) { c["target_hidden_size"] = 7168; }))
                  .find("field 'target_hidden_size' 7168"),
              std::string::npos);
    EXPECT_NE(load_error(edited("vocab", [](json& c) { c["vocab_size"] = 163840; })).find("field 'vocab_size' 163840"),
              std::string::npos);
    EXPECT_NE(load_error(edited("draft_vocab", [](json& c) { c["draft_vocab_size"] = 256; }))
                  .find("field 'draft_vocab_size' 256"),
              std::string::npos);
    EXPECT_NE(load_error(edited("layers", [](json& c) { c["num_hidden_layers"] = 2; }))
                  .find("field 'num_hidden_layers' 2"),
              std::string::npos);
    // the fc's width from the config: one tap more than the file's fc reads names the tensor
    EXPECT_NE(load_error(edited("fc", [](json& c) {
                  c["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = {1, 2, 3, 5};
                  c["num_aux_hidden_states"] = 4;
              })).find("fc.weight"),
              std::string::npos);
    EXPECT_NE(load_error(edited("arch", [](json& c) { c["architectures"] = {"DeepseekV3ForCausalLM"}; }))
                  .find("field 'architectures'"),
              std::string::npos);
}

// A head over fewer ids than the target's vocabulary (vLLM's draft_vocab_size with d2t; the release has none):
// synth's reduced head covers every fifth-or-so target id, d2t maps its ids back, the drafts are the target ids of
// the head's argmax, and greedy output with them is still plain greedy. A missing d2t, or one that maps outside the
// vocabulary, is an error naming the tensor.
TEST(Eagle3, ReducedHeadMapsItsIdsThroughD2t) {
    const fs::path dir = dirs().root / "eagle3_d2t";
    constexpr int64_t kDraftVocab = 100;
    synth_checkpoint({.like = "kimi-k3-eagle3", .layers = 1, .scale_down = 32, .seed = 13, .out_dir = dir.string(),
                      .target_dir = dirs().target.string(), .draft_vocab_size = kDraftVocab, .sync = false});
    const json c = json::parse(std::ifstream(dir / "config.json"));
    const int64_t V = c["vocab_size"], h = c["hidden_size"];
    EXPECT_EQ(c["draft_vocab_size"], kDraftVocab);
    Checkpoint ck(dir.string());
    EXPECT_EQ(ck.get("lm_head.weight").shape(), (std::vector<int64_t>{kDraftVocab, h}));
    EXPECT_EQ(ck.get("d2t").shape(), (std::vector<int64_t>{kDraftVocab}));
    std::vector<int32_t> image;  // target id of each draft id: k * V / kDraftVocab
    for (int64_t k = 0; k < kDraftVocab; ++k) image.push_back(int32_t(k * V / kDraftVocab));

    auto model = load_model(dirs().target.string());
    auto em = Eagle3Model::load(dir.string(), *model);
    model->set_hidden_taps(em->config().tapped_layers());
    const auto ids = test::drafter_prompt();
    const int64_t W = em->config().tap_width(), L = int64_t(ids.size()) - 1, N = 7;
    const auto s = test::prefill(*model, std::span<const int32_t>(ids).first(size_t(L)));
    std::vector<float> rows(size_t(L * W));
    for (int64_t t = 0; t < L; ++t) std::copy_n(s->taps().row(t), W, rows.data() + t * W);
    auto seq = em->new_seq();
    const auto ch = em->propose(seq, rows.data(), ids.data() + 1, L, N);
    ASSERT_EQ(ch.drafts.size(), size_t(N));
    ASSERT_EQ(ch.logits.size(), size_t(N * kDraftVocab));
    if (const char* dump = std::getenv("SLUICE_EAGLE3_DUMP")) {  // for tools/reference/eagle3_reference.py
        const fs::path out = std::string(dump) + "_d2t";
        fs::create_directories(out);
        npy_write_f32((out / "taps.npy").string(), rows.data(), {L, W});
        npy_write_f32((out / "logits.npy").string(), ch.logits.data(), {N, kDraftVocab});
        std::ofstream(out / "meta.json") << json{{"tokens", ids}, {"drafts", ch.drafts}, {"eagle3", fs::absolute(dir)},
                                                 {"target", fs::absolute(dirs().target)}}.dump(2);
    }
    for (int64_t i = 0; i < N; ++i) {
        const float* row = ch.logits.data() + i * kDraftVocab;
        const int64_t best = std::max_element(row, row + kDraftVocab) - row;
        EXPECT_EQ(ch.drafts[size_t(i)], image[size_t(best)]) << "draft " << i;
    }
    Eagle3Drafter ed(dir.string(), *model);
    test::expect_greedy_same_as_plain(*model, [&] { return ed.drafter(); });

    // sampled drafting: the pick sees each head's logits over the reduced vocabulary with d2t as its offsets, and
    // the drafts are what it returns (here draws of a sampled request, whose q lies on the head's image)
    SamplingParams sp;
    sp.temperature = 1.0f;
    sp.seed = 5;
    Sampler sampler(sp);
    std::vector<int32_t> picked;
    const DraftPick pick = [&](std::span<const float> logits, std::span<const int64_t> offsets) {
        EXPECT_EQ(logits.size(), size_t(kDraftVocab));
        EXPECT_EQ(offsets.size(), size_t(kDraftVocab));
        DraftDist q;
        picked.push_back(sampler.draw_draft(logits, offsets, q));
        EXPECT_EQ(q.ids.size(), size_t(kDraftVocab));
        for (int32_t id : q.ids) EXPECT_NE(std::find(image.begin(), image.end(), id), image.end()) << id;
        return picked.back();
    };
    auto seq2 = em->new_seq();
    const auto drawn = em->propose(seq2, rows.data(), ids.data() + 1, L, N, &pick);
    EXPECT_EQ(drawn.drafts, picked);
    EXPECT_NE(drawn.drafts, ch.drafts) << "at temperature 1 some draw should differ from the argmax";

    // the same head without its d2t (the config linked, the tensors copied but d2t)
    EXPECT_NE(load_error(edited("d2t_vocab_high", [](json& x) { x["draft_vocab_size"] = int64_t(x["vocab_size"]) + 1; }))
                  .find("is outside [1, vocab_size"),
              std::string::npos);
    const fs::path no_d2t = edited("d2t_missing", [&](json& x) { x["draft_vocab_size"] = kDraftVocab; });
    EXPECT_NE(load_error(no_d2t).find("tensor 'd2t' is missing"), std::string::npos) << load_error(no_d2t);
    // d2t's first entry moved past the vocabulary: patch the copy's bytes
    const fs::path bad = dirs().root / "eagle3_d2t_bad";
    fs::remove_all(bad);
    fs::create_directories(bad);
    fs::copy_file(dir / "config.json", bad / "config.json");
    std::string bytes;
    {
        std::ifstream in(dir / "model.safetensors", std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    const json header = json::parse(bytes.substr(8, n));
    const uint64_t at = 8 + n + uint64_t(header["d2t"]["data_offsets"][0]);
    const int64_t far = V + 5;
    std::memcpy(bytes.data() + at, &far, 8);
    std::ofstream(bad / "model.safetensors", std::ios::binary) << bytes;
    const std::string e = test::drafter_load_error<Eagle3Model>(dirs(), bad);
    EXPECT_NE(e.find("tensor 'd2t' entry 0 is " + std::to_string(far)), std::string::npos) << e;
}
