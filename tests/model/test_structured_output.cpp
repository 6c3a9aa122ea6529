// Structured output in the engine, on the shipped trained model (models/sluice-k2-tiny, its own BPE vocabulary):
// constrained requests end in an instance of the schema with finish "stop"; greedy output is the same with
// speculative drafts (a masked draft is rejected, the rest verify as usual); sampled output is reproducible for a
// seed; a constraint that cannot go on ends its request with finish "unsatisfiable" instead of hanging.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "models/model.h"
#include "runtime/engine.h"
#include "runtime/token_mask.h"
#include "tokenizer/tokenizer.h"
#include "../support/json_instance.h"

using namespace sluice;

namespace {

const std::string k_dir = std::string(SLUICE_SOURCE_DIR) + "/models/sluice-k2-tiny";

const char* k_schema = R"({"type":"object","additionalProperties":false,"required":["book","chapter","holy"],
  "properties":{"book":{"enum":["Genesis","Exodus","Psalms"]},"chapter":{"type":"integer"},"holy":{"type":"boolean"},
  "verses":{"type":"array","maxItems":2,"items":{"type":"string"}}}})";

struct Out {
    std::vector<int32_t> ids;
    FinishReason finish = FinishReason::none;
};

class StructuredOutput : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        model_ = load_model(k_dir, {.n_threads = 2}).release();
        tok_ = tok::load_tokenizer(k_dir).release();
        trie_ = new std::shared_ptr<const TokenTrie>(TokenTrie::from_tokenizer(*tok_, model_->info().vocab_size));
    }
    static Model* model_;
    static tok::Tokenizer* tok_;
    static std::shared_ptr<const TokenTrie>* trie_;

    static ConstraintFactory factory(const char* schema) {
        auto a = std::make_shared<const schema::Automaton>(schema::compile_schema(nlohmann::ordered_json::parse(schema)));
        return json_constraint_factory(a, *trie_);
    }
    RequestParams params(const char* schema, float temperature, uint64_t seed, int64_t draft = 0) {
        RequestParams p;
        p.prompt = tok_->encode("In the beginning God created", false);
        p.max_new_tokens = 160;
        p.sampling.temperature = temperature;
        p.sampling.seed = seed;
        p.draft_tokens = draft;
        p.constraint = factory(schema);
        return p;
    }
    std::vector<Out> run(std::vector<RequestParams> ps) {
        Engine engine(*model_, {.max_batch_rows = 64, .max_sequences = 8, .max_context_tokens = 2048});
        std::vector<Out> out(ps.size());
        for (size_t i = 0; i < ps.size(); ++i)
            engine.submit(ps[i], [&out, i](const TokenEvent& ev) {
                if (ev.id >= 0) out[i].ids.push_back(ev.id);
                if (ev.finish != FinishReason::none) out[i].finish = ev.finish;
                return true;
            });
        engine.run_until_idle();
        return out;
    }
    std::string text(const Out& o) { return tok_->decode(o.ids, true); }
};

Model* StructuredOutput::model_ = nullptr;
tok::Tokenizer* StructuredOutput::tok_ = nullptr;
std::shared_ptr<const TokenTrie>* StructuredOutput::trie_ = nullptr;

}  // namespace

TEST_F(StructuredOutput, GreedyAndSampledOutputsAreInstances) {
    const nlohmann::json schema = nlohmann::json::parse(k_schema);
    std::vector<RequestParams> ps{params(k_schema, 0.0f, 0)};
    for (uint64_t seed = 1; seed <= 4; ++seed) ps.push_back(params(k_schema, 0.8f, seed));
    const std::vector<Out> out = run(ps);
    int stopped = 0;
    for (const Out& o : out) {
        if (o.finish != FinishReason::stop) {
            EXPECT_EQ(o.finish, FinishReason::length) << text(o);  // a long string may run out of tokens; never anything else
            continue;
        }
        ++stopped;
        const nlohmann::json v = nlohmann::json::parse(text(o), nullptr, false);
        ASSERT_FALSE(v.is_discarded()) << text(o);
        EXPECT_TRUE(test::is_instance(v, schema)) << text(o);
    }
    EXPECT_EQ(out[0].finish, FinishReason::stop) << text(out[0]);
    EXPECT_GE(stopped, 3);
    // the same seed gives the same tokens
    EXPECT_EQ(run({params(k_schema, 0.8f, 3)})[0].ids, out[3].ids);
}

TEST_F(StructuredOutput, SpeculativeDraftsChangeNothingGreedy) {
    const Out plain = run({params(k_schema, 0.0f, 0)})[0];
    const Out drafted = run({params(k_schema, 0.0f, 0, 4)})[0];
    EXPECT_EQ(plain.ids, drafted.ids);
    EXPECT_EQ(plain.finish, drafted.finish);
    // unconstrained greedy differs: the mask did act
    RequestParams free = params(k_schema, 0.0f, 0);
    free.constraint = {};
    EXPECT_NE(run({free})[0].ids, plain.ids);
}

namespace {
// Allows only token 0's... nothing after two tokens.
class DeadEnd : public TokenConstraint {
public:
    bool mask(std::span<float> logits, std::span<const int32_t>) override {
        if (taken_ >= 2) {
            for (float& x : logits) x = -INFINITY;
            return false;
        }
        return true;
    }
    void accept(int32_t) override { ++taken_; }
    bool finished() const override { return false; }

private:
    int taken_ = 0;
};
}  // namespace

TEST_F(StructuredOutput, AConstraintThatCannotGoOnEndsTheRequest) {
    RequestParams p = params(k_schema, 0.0f, 0, 2);
    p.constraint = [] { return std::make_unique<DeadEnd>(); };
    const Out o = run({p})[0];
    EXPECT_EQ(o.ids.size(), 2u);
    EXPECT_EQ(o.finish, FinishReason::unsatisfiable);
    EXPECT_STREQ(to_string(FinishReason::unsatisfiable), "schema_unsatisfiable");
}
