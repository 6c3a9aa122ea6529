// `synth`'s vocabulary: by default the synthetic tokenizer's size, for every layout and scale, so every id a
// synthesized head produces decodes to text; --vocab-size asks for more rows. Plans only (no files written).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "models/synth.h"
#include "models/synth_tokenizer.h"

using namespace sluice;

namespace {

SynthOptions plan_only(const std::string& like) {
    SynthOptions o;
    o.like = like;
    o.layers = 2;
    o.experts = 4;
    o.out_dir = "unused";
    return o;
}

}  // namespace

// The head has as many ids as the synthetic tokenizer, so every generated id decodes to text, for every layout and
// scale; --vocab-size asks for more rows and below the tokenizer's size is refused.
TEST(Synth, VocabularyIsTheTokenizersUnlessAsked) {
    const int64_t V = synth::synth_tokenizer_vocab_size();
    for (const char* like : {"kimi-k2", "deepseek-v3", "kimi-k3", "kimi-linear", "qwen3-moe", "mixtral", "gpt-oss"}) {
        for (int64_t scale : {1, 32}) {
            for (int64_t asked : {int64_t(0), int64_t(1000)}) {
                SCOPED_TRACE(std::string(like) + " scale " + std::to_string(scale) + " vocab " + std::to_string(asked));
                SynthOptions o = plan_only(like);
                o.scale_down = scale;
                o.vocab_size = asked;
                const SynthPlan p = plan_synth(o);
                const int64_t want = asked ? asked : V;
                EXPECT_EQ(p.dims.vocab_size, want);
                const auto cfg = nlohmann::json::parse(p.config_json);
                EXPECT_EQ((cfg.contains("text_config") ? cfg["text_config"] : cfg)["vocab_size"], want);
                int heads = 0;
                for (const auto& t : p.tensors)
                    if (t.name.ends_with("lm_head.weight") || t.name.ends_with("embed_tokens.weight")) {
                        EXPECT_EQ(t.shape[0], want) << t.name;
                        ++heads;
                    }
                EXPECT_EQ(heads, 2);
            }
        }
        SynthOptions bad = plan_only(like);
        bad.vocab_size = V - 1;
        try {
            plan_synth(bad);
            ADD_FAILURE() << like << ": --vocab-size below the tokenizer's was accepted";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("--vocab-size"), std::string::npos) << e.what();
        }
    }
}
