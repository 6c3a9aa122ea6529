// Bad model folders and bad requests: one clear error naming the file and the field, never a crash.
// Broken folders are made from a real fixture by rewriting its config.json or its safetensors header.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../support/st_builder.h"
#include "../support/test_util.h"
#include "core/error.h"
#include "formats/safetensors.h"
#include "models/model.h"
#include "ops/exec_context.h"
#include "runtime/generate.h"

using namespace sluice;
using namespace sluice::test;
namespace fs = std::filesystem;

namespace {

const std::string kFixture = std::string(SLUICE_TEST_DATA_DIR) + "/fixtures/k2_noqlora";

std::string read_all(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// A copy of the fixture whose config.json and safetensors header pass through the given edits.
std::string broken_copy(const std::string& name, const std::function<void(nlohmann::json&)>& edit_config,
                        const std::function<void(nlohmann::json&)>& edit_header = nullptr, size_t truncate_bytes = 0,
                        const std::string& fixture = kFixture) {
    std::string dir = temp_dir(name);
    auto cfg = nlohmann::json::parse(read_all(fixture + "/config.json"));
    if (edit_config) edit_config(cfg);
    write_file(dir + "/config.json", cfg.dump());
    std::string st = read_all(fixture + "/model.safetensors");
    if (edit_header) {
        uint64_t n;
        std::memcpy(&n, st.data(), 8);
        auto h = nlohmann::json::parse(st.substr(8, n));
        edit_header(h);
        std::string hs = h.dump();
        while (hs.size() % 8) hs += ' ';
        st = safetensors_bytes(hs, st.substr(8 + n));
    }
    if (truncate_bytes) st.resize(st.size() - truncate_bytes);
    write_file(dir + "/model.safetensors", st);
    return dir;
}

std::string load_error(const std::string& dir) {
    const std::string e = test::error_of([&] { load_model(dir); });
    return e.empty() ? "(no error)" : e;
}

#define EXPECT_CONTAINS(haystack, needle) \
    EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "expected '" << (needle) << "' in: " << (haystack)

}  // namespace

TEST(ModelErrors, MissingFolderOrConfig) {
    EXPECT_CONTAINS(load_error("/nonexistent/model"), "/nonexistent/model: no such folder");
    auto dir = temp_dir("noconfig");
    write_file(dir + "/file", "x");
    EXPECT_CONTAINS(load_error(dir + "/file"), "file: not a directory");
    EXPECT_CONTAINS(load_error(dir), "config.json: not found");
    write_file(dir + "/config.json", "{\"architectures\": [");
    EXPECT_CONTAINS(load_error(dir), "config.json: not valid JSON");
}

TEST(ModelErrors, UnknownArchitecture) {
    auto dir = broken_copy("unknown_arch", [](auto& c) {
        c["architectures"] = {"LlamaForCausalLM"};
        c["model_type"] = "llama";
    });
    auto err = load_error(dir);
    EXPECT_CONTAINS(err, "config.json: unknown architecture 'LlamaForCausalLM'");
    EXPECT_CONTAINS(err, "supported: DeepseekV3ForCausalLM");
}

TEST(ModelErrors, MalformedConfigField) {
    EXPECT_CONTAINS(load_error(broken_copy("bad_field", [](auto& c) { c["kv_lora_rank"] = "512"; })),
                    "config.json: field 'kv_lora_rank' must be an integer");
    EXPECT_CONTAINS(load_error(broken_copy("missing_field", [](auto& c) { c.erase("hidden_size"); })),
                    "config.json: field 'hidden_size' is missing");
}

// Kimi Linear's two config forms (models/kimi_layout.h), from the fixture transformers 5's save_pretrained wrote
// (layer_types, mlp_layer_types, linear_*): neither form, a malformed list, or both forms disagreeing each name
// the field; both forms agreeing load.
TEST(ModelErrors, KimiConfigFormsNameTheField) {
    const std::string t5 = std::string(SLUICE_TEST_DATA_DIR) + "/fixtures/kimi_linear_t5_saved";
    auto edited = [&](const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
        return load_error(broken_copy(name, edit, nullptr, 0, t5));
    };
    EXPECT_CONTAINS(edited("kimi_neither", [](auto& c) { c.erase("layer_types"); }),
                    "config.json: field 'linear_attn_config' (hub form) or 'layer_types' (transformers 5 form) is missing");
    EXPECT_CONTAINS(edited("kimi_short", [](auto& c) { c["layer_types"].erase(0); }),
                    "field 'layer_types' has 3 entries, num_hidden_layers is 4");
    EXPECT_CONTAINS(edited("kimi_type", [](auto& c) { c["layer_types"][1] = "sliding_attention"; }),
                    "field 'layer_types' entry 1 is 'sliding_attention'");
    EXPECT_CONTAINS(edited("kimi_mlp", [](auto& c) { c["mlp_layer_types"][0] = "moe"; }),
                    "field 'mlp_layer_types' entry 0 is 'moe'");
    EXPECT_CONTAINS(edited("kimi_heads", [](auto& c) { c["linear_num_heads"] = 0; }),
                    "field 'linear_num_heads' must be > 0");
    const nlohmann::json hub = {{"full_attn_layers", {2, 4}}, {"kda_layers", {1, 3}}, {"num_heads", 3}, {"head_dim", 8},
                                {"short_conv_kernel_size", 4}};
    EXPECT_EQ(edited("kimi_both", [&](auto& c) { c["linear_attn_config"] = hub; }), "(no error)");
    EXPECT_CONTAINS(edited("kimi_both_layers", [&](auto& c) {
                        c["linear_attn_config"] = hub;
                        c["linear_attn_config"]["full_attn_layers"] = {1, 4};
                        c["linear_attn_config"]["kda_layers"] = {2, 3};
                    }),
                    "fields 'linear_attn_config' and 'layer_types' disagree about layer 0");
    EXPECT_CONTAINS(edited("kimi_both_heads", [&](auto& c) {
                        c["linear_attn_config"] = hub;
                        c["linear_num_heads"] = 4;
                    }),
                    "fields 'linear_attn_config.num_heads' (3) and 'linear_num_heads' (4) disagree");
    EXPECT_CONTAINS(edited("kimi_both_dense", [](auto& c) { c["first_k_dense_replace"] = 1; }),
                    "fields 'mlp_layer_types' and 'first_k_dense_replace' disagree about layer 0");
}

TEST(ModelErrors, UnsupportedQuantization) {
    EXPECT_CONTAINS(load_error(broken_copy("awq", [](auto& c) {
                        c["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4}};
                    })),
                    "config.json: quantization_config: quant_method 'awq' is not supported");
    EXPECT_CONTAINS(load_error(broken_copy("fp8_block", [](auto& c) {
                        c["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {64, 64}}};
                    })),
                    "weight_block_size must be [128, 128]");
}

TEST(ModelErrors, ConfigDisagreesWithTensors) {
    auto err = load_error(broken_copy("wrong_hidden", [](auto& c) { c["hidden_size"] = 96; }));
    EXPECT_CONTAINS(err, "model.safetensors: tensor 'model.embed_tokens.weight' has shape [256, 64], expected [256, 96]");
}

TEST(ModelErrors, MissingTensor) {
    auto err = load_error(broken_copy("missing_tensor", nullptr, [](auto& h) {
        h["model.layers.0.self_attn.q_proj.weight_renamed"] = h["model.layers.0.self_attn.q_proj.weight"];
        h.erase("model.layers.0.self_attn.q_proj.weight");
    }));
    EXPECT_CONTAINS(err, "tensor 'model.layers.0.self_attn.q_proj.weight' not found");
}

TEST(ModelErrors, WrongDtype) {
    auto err = load_error(broken_copy("wrong_dtype", nullptr, [](auto& h) {
        h["model.norm.weight"]["dtype"] = "I16";  // same byte size as BF16
    }));
    EXPECT_CONTAINS(err, "tensor 'model.norm.weight' has dtype I16, expected F32, BF16 or F16");
}

TEST(ModelErrors, WrongShape) {
    auto err = load_error(broken_copy("wrong_shape", nullptr, [](auto& h) {
        auto s = h["model.layers.0.self_attn.kv_b_proj.weight"]["shape"];
        h["model.layers.0.self_attn.kv_b_proj.weight"]["shape"] = {s[1], s[0]};
    }));
    EXPECT_CONTAINS(err, "tensor 'model.layers.0.self_attn.kv_b_proj.weight' has shape");
}

TEST(ModelErrors, TruncatedWeights) {
    auto err = load_error(broken_copy("truncated", nullptr, nullptr, 1000));
    EXPECT_CONTAINS(err, "model.safetensors: tensor");
    EXPECT_CONTAINS(err, "file truncated?");
}

TEST(ModelErrors, GptOssBadConfigAndTensors) {
    const std::string gpt = std::string(SLUICE_TEST_DATA_DIR) + "/fixtures/gpt_oss_swa_sinks_mxfp4";
    auto cfg_error = [&](const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
        return load_error(broken_copy(name, edit, nullptr, 0, gpt));
    };
    EXPECT_CONTAINS(cfg_error("gpt_layer_types", [](auto& c) { c["layer_types"] = {"sliding_attention"}; }),
                    "layer_types has 1 entries for 3 layers");
    EXPECT_CONTAINS(cfg_error("gpt_layer_kind", [](auto& c) { c["layer_types"][1] = "chunked_attention"; }),
                    "layer_types[1] is 'chunked_attention'");
    EXPECT_CONTAINS(cfg_error("gpt_heads", [](auto& c) { c["num_key_value_heads"] = 3; }),
                    "must be a positive multiple of num_key_value_heads (3)");
    EXPECT_CONTAINS(cfg_error("gpt_topk", [](auto& c) { c["num_experts_per_tok"] = 9; }),
                    "num_experts_per_tok (9) must be in [1, num_local_experts = 8]");
    auto err = load_error(broken_copy("gpt_no_scales", nullptr, [](auto& h) {
        h["x.scales"] = h["model.layers.2.mlp.experts.down_proj_scales"];
        h.erase("model.layers.2.mlp.experts.down_proj_scales");
    }, 0, gpt));
    EXPECT_CONTAINS(err, "tensor 'model.layers.2.mlp.experts.down_proj_scales' not found");
    err = load_error(broken_copy("gpt_dequantised", nullptr, [](auto& h) {
        h["model.layers.0.mlp.experts.gate_up_proj"] = h["model.layers.0.mlp.experts.gate_up_proj_blocks"];
        h.erase("model.layers.0.mlp.experts.gate_up_proj_blocks");
    }, 0, gpt));
    EXPECT_CONTAINS(err, "only the hub's MXFP4");
    err = load_error(broken_copy("gpt_blocks_dtype", nullptr, [](auto& h) {
        h["model.layers.1.mlp.experts.gate_up_proj_blocks"]["dtype"] = "I8";
    }, 0, gpt));
    EXPECT_CONTAINS(err, "tensor 'model.layers.1.mlp.experts.gate_up_proj_blocks' has dtype I8, expected U8");
}

// compressed-tensors' weight_shape must agree with the shape the model expects.
TEST(ModelErrors, Int4WeightShapeDisagrees) {
    const std::string src = std::string(SLUICE_TEST_DATA_DIR) + "/fixtures/k2_thinking_int4";
    const std::string dir = temp_dir("int4_weight_shape");
    write_file(dir + "/config.json", read_all(src + "/config.json"));
    std::string st = read_all(src + "/model.safetensors");
    uint64_t n;
    std::memcpy(&n, st.data(), 8);
    const auto h = nlohmann::json::parse(st.substr(8, n));
    const std::string name = "model.layers.1.mlp.experts.5.down_proj.weight_shape";
    ASSERT_EQ(h[name]["dtype"], "I32");
    const uint64_t off = 8 + n + h[name]["data_offsets"][0].get<uint64_t>();
    const int32_t bogus = 77;
    std::memcpy(st.data() + off, &bogus, 4);
    write_file(dir + "/model.safetensors", st);
    EXPECT_CONTAINS(load_error(dir), "tensor '" + name + "' says [77, 96], the model expects [128, 96]");
}

TEST(ModelErrors, TokenOutsideVocabulary) {
    auto model = load_model(kFixture);
    std::vector<int32_t> ids = {1, 2, 256};
    try {
        prompt_logits(*model, ids, 16);
        FAIL();
    } catch (const Error& e) {
        EXPECT_CONTAINS(e.what(), "prompt token 2 (256) is outside the vocabulary [0, 256)");
    }
    // the forward pass checks its batch too
    auto seq = model->new_sequence();
    SequenceState* seqs[] = {seq.get()};
    Batch b;
    for (size_t i = 0; i < ids.size(); ++i) b.add(ids[i], int64_t(i), 0, true);
    std::vector<float> logits;
    try {
        model->forward(*make_exec_context(*model), b, seqs, logits);
        FAIL();
    } catch (const Error& e) {
        EXPECT_CONTAINS(e.what(), "token id 256 at batch row 2 is outside the vocabulary [0, 256)");
    }
}

TEST(ModelErrors, RowsMustContinueTheCache) {
    auto model = load_model(kFixture);
    auto seq = model->new_sequence();
    SequenceState* seqs[] = {seq.get()};
    Batch b;
    b.add(1, 5, 0, true);
    std::vector<float> logits;
    try {
        model->forward(*make_exec_context(*model), b, seqs, logits);
        FAIL();
    } catch (const Error& e) {
        EXPECT_CONTAINS(e.what(), "expected position 0, got 5");
    }
}

// The CLI turns each of these into one line on stderr and exit status 1.
TEST(ModelErrors, CliExitsWithOneClearLine) {
    const std::string bin = SLUICE_BINARY;
    const std::string out = temp_dir("cli") + "/out.npy";
    struct Case {
        std::string args, needle;
    } cases[] = {
        {"logits -m " + kFixture + " --ids 1,x,3 -o " + out, "--ids: item 1 ('x') is not an integer"},
        {"logits -m " + kFixture + " --ids 1,999 -o " + out, "prompt token 1 (999) is outside the vocabulary [0, 256)"},
        {"generate -m /nonexistent --ids 1 -n 2", "/nonexistent: no such folder"},
        {"generate -m /nonexistent -p hi -n 2", "/nonexistent: no such folder"},
        {"inspect -m " + kFixture + "/config.json", "config.json: not a directory (expected a Hugging Face model folder)"},
        {"generate -m " + kFixture + " --ids 1 -n 2 --top-p 3", "top-p must be in (0, 1]"},
        {"inspect -m " + std::string(SLUICE_TEST_DATA_DIR), "config.json: not found"},
    };
    for (const auto& c : cases) {
        std::string cmd = bin + " " + c.args + " 2>&1 >/dev/null";
        FILE* p = popen(cmd.c_str(), "r");
        ASSERT_TRUE(p);
        std::string err;
        std::array<char, 512> buf;
        while (fgets(buf.data(), int(buf.size()), p)) err += buf.data();
        const int status = pclose(p);
        EXPECT_EQ(WEXITSTATUS(status), 1) << c.args;
        EXPECT_CONTAINS(err, c.needle);
        EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
        EXPECT_EQ(err.rfind("sluice: error: ", 0), 0u) << err;
    }
}
