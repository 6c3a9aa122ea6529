// The trained default model and its draft (models/, made by tools/train/train.py on an H200) against the float32
// references that transformers wrote from the exported folders (from_pretrained, eager attention and experts):
// logits within 1e-4 relative error and the same argmax at every position, greedy continuations identical, and
// the same again with the routed experts streamed from disk under a budget smaller than the model. The prompts
// come from the shipped tokenizer: the plain prompt's ids and the chat template's rendering must be what
// transformers' tokenizer produced.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "experts/expert_cache.h"
#include "core/npy.h"
#include "experts/residency.h"
#include "models/model.h"
#include "runtime/generate.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "../support/st_builder.h"
#include "../support/device_env.h"
#include "../support/test_util.h"

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

using test::rel_error;

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

// A cache policy with bookkeeping of its own (markov's transition counts) has it reserved in the memory plan: the
// expert cache gets exactly that much less than under LRU, so the whole stays inside --memory.
TEST_P(TrainedModel, CachePolicyMemoryIsInThePlan) {
    Reference r = load_reference(GetParam());
    LoadOptions lo{.n_threads = 2};
    lo.max_context_tokens = 256;
    lo.memory_budget_bytes = uint64_t(90) << 20;  // a streamed spine and an expert cache of part of the experts
    lo.streaming.policy = "lru";
    auto lru = load_model(r.dir, lo);
    lo.streaming.policy = "markov";
    auto markov = load_model(r.dir, lo);
    const ModelInfo& info = lru->info();
    const uint64_t table = cache_policy_bytes("markov", info.n_moe_layers, info.n_routed_experts);
    EXPECT_GT(table, 0u);
    EXPECT_EQ(lru->residency()->expert_cache_bytes - markov->residency()->expert_cache_bytes, table);
}

// `sluice demo` runs the trained model by default, experts streamed under its default budget: with temperature 0
// it prints the prompt and transformers' greedy continuation up to the EOS, and its statistics show disk reads.
TEST(TrainedModelDemo, DefaultDemoPrintsTheReferenceGreedyTextWhileStreaming) {
    Reference r = load_reference("sluice-k2-tiny");
    const std::string err_file = test::temp_dir("demo_trained") + "/stderr.txt";
    const std::string cmd = std::string("SLUICE_DEMO_MODEL= ") + SLUICE_BINARY + " demo -t 2 --temp 0 -n " +
                            std::to_string(r.greedy.size()) + " -p '" + r.j["prompt"].get<std::string>() + "' 2>" +
                            err_file;
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    std::array<char, 4096> buf;
    while (fgets(buf.data(), int(buf.size()), p)) out += buf.data();
    ASSERT_EQ(WEXITSTATUS(pclose(p)), 0);
    std::vector<int32_t> until_eos;
    for (int32_t id : r.greedy) {
        if (id == 1) break;  // <|eos|>
        until_eos.push_back(id);
    }
    auto tok = tok::load_tokenizer(r.dir);
    EXPECT_EQ(out, r.j["prompt"].get<std::string>() + tok->decode(until_eos, true) + "\n");
    std::ifstream ef(err_file);
    const std::string err((std::istreambuf_iterator<char>(ef)), std::istreambuf_iterator<char>());
    EXPECT_NE(err.find("sluice-k2-tiny"), std::string::npos) << err;
    EXPECT_NE(err.find("the rest stream from disk"), std::string::npos) << err;
    const size_t at = err.find("bytes read ");
    ASSERT_NE(at, std::string::npos) << err;
    EXPECT_NE(err.compare(at, 13, "bytes read 0 "), 0) << err;
}

INSTANTIATE_TEST_SUITE_P(Models, TrainedModel, ::testing::Values("sluice-k2-tiny", "sluice-k2-tiny-draft"),
                         [](const auto& info) {
                             std::string s = info.param;
                             std::replace(s.begin(), s.end(), '-', '_');
                             return s;
                         });

}  // namespace
