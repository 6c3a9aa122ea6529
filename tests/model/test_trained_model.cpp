// The trained default model and its draft (models/, made by tools/train/train.py on an H200) against the float32
// references that transformers wrote from the exported folders (from_pretrained, eager attention and experts):
// logits within 1e-4 relative error and the same argmax at every position, greedy continuations identical, and
// the same again with the routed experts streamed from disk under a budget smaller than the model. The prompts
// come from the shipped tokenizer: the plain prompt's ids and the chat template's rendering must be what
// transformers' tokenizer produced.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/npy.h"
#include "experts/residency.h"
#include "models/model.h"
#include "runtime/generate.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

using namespace sluice;
namespace fs = std::filesystem;

namespace {

struct Reference {
    std::string dir;
    nlohmann::json j;
    std::vector<int32_t> ids, greedy, ids_b, greedy_b;
    std::vector<float> ref, ref_b;
};

Reference load_reference(const std::string& name) {
    Reference r;
    r.dir = std::string(SLUICE_SOURCE_DIR) + "/models/" + name;
    std::ifstream in(r.dir + "/ref.json");
    r.j = nlohmann::json::parse(in);
    r.ids = r.j["ids"].get<std::vector<int32_t>>();
    r.greedy = r.j["greedy"].get<std::vector<int32_t>>();
    r.ids_b = r.j["ids_b"].get<std::vector<int32_t>>();
    r.greedy_b = r.j["greedy_b"].get<std::vector<int32_t>>();
    r.ref = npy_read(r.dir + "/ref_logits.npy").as_f32();
    r.ref_b = npy_read(r.dir + "/ref_logits_b.npy").as_f32();
    return r;
}

double rel_error(const std::vector<float>& a, const std::vector<float>& ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        num = std::max(num, std::fabs(double(a[i]) - ref[i]));
        den = std::max(den, std::fabs(double(ref[i])));
    }
    return num / den;
}

std::vector<int> argmax_rows(const std::vector<float>& v, int64_t V) {
    std::vector<int> out;
    for (size_t i = 0; i * size_t(V) < v.size(); ++i)
        out.push_back(int(std::max_element(v.begin() + int64_t(i) * V, v.begin() + int64_t(i + 1) * V) -
                          (v.begin() + int64_t(i) * V)));
    return out;
}

void expect_matches(Model& model, const Reference& r, const char* how) {
    const int64_t V = model.info().vocab_size;
    for (auto [ids, ref, label] : {std::tuple{&r.ids, &r.ref, "a"}, std::tuple{&r.ids_b, &r.ref_b, "b"}}) {
        auto logits = prompt_logits(model, *ids, 4096);
        ASSERT_EQ(logits.size(), ref->size());
        const double err = rel_error(logits, *ref);
        std::printf("[ trained  ] %s %s, prompt %s: relative error %.3g over [%zu, %lld]\n",
                    fs::path(r.dir).filename().c_str(), how, label, err, ids->size(), (long long)V);
        EXPECT_LE(err, 1e-4) << how << ", prompt " << label;
        EXPECT_EQ(argmax_rows(logits, V), argmax_rows(*ref, V)) << how << ", prompt " << label;
    }
    GenerateOptions opt;
    opt.max_new_tokens = int64_t(r.greedy.size());
    opt.stop_at_eos = false;
    EXPECT_EQ(generate(model, r.ids, opt).ids, r.greedy) << how;
    opt.max_new_tokens = int64_t(r.greedy_b.size());
    EXPECT_EQ(generate(model, r.ids_b, opt).ids, r.greedy_b) << how;
}

class TrainedModel : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainedModel, TokenizerAndChatTemplateGiveTheReferencePrompts) {
    Reference r = load_reference(GetParam());
    auto tok = tok::load_tokenizer(r.dir);
    EXPECT_EQ(tok->encode(r.j["prompt"].get<std::string>(), true), r.ids);
    ChatRequest req;
    req.messages = nlohmann::ordered_json::parse(r.j["prompt_b_messages"].dump());
    req.add_generation_prompt = true;
    const std::string text = ChatTemplate::from_model_dir(r.dir).apply(req);
    EXPECT_EQ(tok->encode(text, false), r.ids_b) << text;
    // the greedy text transformers decoded
    EXPECT_EQ(tok->decode(r.greedy), r.j["text_greedy"].get<std::string>());
    EXPECT_EQ(tok->decode(r.greedy_b), r.j["text_greedy_b"].get<std::string>());
}

TEST_P(TrainedModel, MatchesTransformers) {
    Reference r = load_reference(GetParam());
    auto model = load_model(r.dir, {.n_threads = 2});
    expect_matches(*model, r, "memory-mapped");
}

// Under a budget of half the routed experts' bytes the experts stream from disk: the same logits and tokens.
TEST_P(TrainedModel, MatchesTransformersWithExpertsStreamed) {
    Reference r = load_reference(GetParam());
    auto full = load_model(r.dir, {.n_threads = 2});
    const ModelInfo& info = full->info();
    LoadOptions lo{.n_threads = 2};
    lo.max_context_tokens = 256;
    // a first plan tells what the budget holds besides the expert cache (spine, sequence state, staging); then
    // leave the cache room for half the routed experts
    lo.memory_budget_bytes = info.spine_bytes + info.routed_expert_bytes_total + (uint64_t(80) << 20);
    const uint64_t other = lo.memory_budget_bytes - load_model(r.dir, lo)->residency()->expert_cache_bytes;
    lo.memory_budget_bytes = other + info.routed_expert_bytes_total / 2;
    auto streamed = load_model(r.dir, lo);
    ASSERT_NE(streamed->streaming(), nullptr);
    ASSERT_NE(streamed->residency(), nullptr);
    std::printf("%s", streamed->residency()->describe().c_str());
    EXPECT_LT(streamed->residency()->expert_cache_bytes, info.routed_expert_bytes_total);
    expect_matches(*streamed, r, "streamed");
    EXPECT_GT(streamed->streaming()->stats().experts_read, 0u);
}

INSTANTIATE_TEST_SUITE_P(Models, TrainedModel, ::testing::Values("sluice-k2-tiny", "sluice-k2-tiny-draft"),
                         [](const auto& info) {
                             std::string s = info.param;
                             std::replace(s.begin(), s.end(), '-', '_');
                             return s;
                         });

}  // namespace
