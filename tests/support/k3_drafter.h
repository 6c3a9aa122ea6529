// What the tests of Kimi K3's drafters (test_dspark, test_eagle3) share: a synthesized K3 target (5 layers: KDA and
// MLA, two AttnRes blocks) with a drafter synthesized for it, made once per process; their prompt; a target prefill
// (which writes tap rows when the model's taps are on); a copy of the drafter folder with config.json edited; the
// greedy check and the load error.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/model.h"
#include "models/synth.h"
#include "runtime/batch.h"
#include "runtime/draft.h"
#include "runtime/generate.h"
#include "runtime/speculative.h"
#include "reference_decode.h"
#include "scratch_dir.h"

namespace sluice::test {

struct K3DrafterDirs {
    std::filesystem::path root, target, drafter;
};

// `like`: the drafter's synth layout (kimi-k3-dspark, kimi-k3-eagle3), with `layers` layers and `seed`.
inline K3DrafterDirs make_k3_drafter(const std::string& name, const std::string& like, int64_t layers, uint64_t seed) {
    K3DrafterDirs x;
    x.root = scratch_dir(name);
    x.target = x.root / "k3";
    x.drafter = x.root / name;
    synth_checkpoint({.like = "kimi-k3", .layers = 5, .experts = 4, .scale_down = 32, .seed = 7,
                      .out_dir = x.target.string(), .sync = false});
    synth_checkpoint({.like = like, .layers = layers, .scale_down = 32, .seed = seed, .out_dir = x.drafter.string(),
                      .target_dir = x.target.string(), .sync = false});
    return x;
}

inline std::vector<int32_t> drafter_prompt() {
    return {5, 17, 3, 99, 42, 7, 11, 150, 31, 64, 2, 8, 200, 13, 77, 5, 17, 3};
}

// The target's state after a plain prefill of ids.
inline std::unique_ptr<SequenceState> prefill(Model& m, std::span<const int32_t> ids) {
    auto seq = m.new_sequence();
    SequenceState* seqs[] = {seq.get()};
    Batch b;
    std::vector<float> logits;
    for (size_t i = 0; i < ids.size(); ++i) b.add(ids[i], int64_t(i), 0, i + 1 == ids.size());
    m.forward(*make_exec_context(m), b, seqs, logits);
    return seq;
}

// A copy of the drafter folder named `name` with config.json edited by f (weights linked).
inline std::filesystem::path edited_drafter(const K3DrafterDirs& d, const std::string& name,
                                            const std::function<void(nlohmann::json&)>& f) {
    namespace fs = std::filesystem;
    const fs::path dir = d.root / name;
    fs::remove_all(dir);
    fs::create_directories(dir);
    fs::create_symlink(fs::absolute(d.drafter / "model.safetensors"), dir / "model.safetensors");
    nlohmann::json c = nlohmann::json::parse(std::ifstream(d.drafter / "config.json"));
    f(c);
    std::ofstream(dir / "config.json") << c.dump(2);
    return dir;
}

// Greedy ids with the drafter's drafts at 1, 3 and 7 per verify equal plain greedy, token for token (the target
// verifies every draft), and it drafted. make_drafter: a Drafter for one request (the drafter loaded on `model`).
inline void expect_greedy_same_as_plain(Model& model, const std::function<Drafter()>& make_drafter) {
    const auto p = drafter_prompt();
    const auto ref = reference_generate(model, p, 40, false);
    for (int64_t k : {1, 3, 7}) {
        SCOPED_TRACE(k);
        GenerateOptions g;
        g.max_new_tokens = 40;
        g.stop_at_eos = false;
        SpeculativeOptions so;
        so.draft_tokens = k;
        so.drafter = make_drafter();
        SpeculativeStats st;
        const GenerateResult r = generate_speculative(model, p, g, so, &st);
        EXPECT_EQ(r.ids, ref.ids);
        EXPECT_GT(st.drafted, 0);  // it drafted: the taps were there
        EXPECT_EQ(st.forward_passes + st.accepted, int64_t(r.ids.size()) - 1);
    }
}

// The error loading the drafter in `dir` (M: DSparkModel, Eagle3Model) against the target gives; "" when it loads.
template <class M>
std::string drafter_load_error(const K3DrafterDirs& d, const std::filesystem::path& dir) {
    auto target = load_model(d.target.string());
    try {
        M::load(dir.string(), *target);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace sluice::test
