// Safetensors writer (single file, sharded + index) and `synth` checkpoints: read back through SafetensorsFile
// and Checkpoint, determinism in the seed and independence of the thread count, quantized scale shapes, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../support/scratch_dir.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/checkpoint.h"
#include "formats/hf_config.h"
#include "formats/safetensors_writer.h"
#include "models/model.h"
#include "models/synth.h"
#include "models/model.h"
#include "models/synth_tokenizer.h"
#include "runtime/generate.h"

using namespace sluice;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir(const std::string& name) { return test::scratch_dir("synth_" + name); }

std::string read_file(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

TensorToWrite from_bytes(const std::string& name, DType dt, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
    auto data = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
    TensorToWrite t{name, dt, std::move(shape), nullptr};
    EXPECT_EQ(t.nbytes(), data->size()) << name;
    t.fill = [data](uint64_t off, uint8_t* dst, uint64_t n) { std::memcpy(dst, data->data() + off, n); };
    return t;
}

std::vector<uint8_t> pattern(size_t n, uint8_t salt) {
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = uint8_t((i * 131 + salt + (i >> 9)) & 0xff);
    return v;
}

SynthOptions small(const std::string& like, const std::string& dtype, const fs::path& out) {
    SynthOptions o;
    o.like = like;
    o.layers = 2;
    o.experts = 4;
    o.expert_dtype = dtype;
    o.scale_down = 32;
    o.seed = 7;
    o.out_dir = out.string();
    o.sync = false;
    return o;
}

// A release's full size (to plan, never written): its layers, experts and vocabulary (the default is the synthetic
// tokenizer's 512), nothing scaled down.
SynthOptions full_size(const std::string& like, int64_t layers, int64_t experts, int64_t vocab_size) {
    SynthOptions o = small(like, "", temp_dir("unused"));
    o.layers = layers;
    o.experts = experts;
    o.scale_down = 1;
    o.vocab_size = vocab_size;
    return o;
}

}  // namespace

TEST(SafetensorsWriter, RoundTripsThroughReader) {
    const fs::path dir = temp_dir("rt");
    std::vector<TensorToWrite> ts;
    // Bigger than the 1 MiB generation piece and the chunk, so batches split inside a tensor.
    ts.push_back(from_bytes("big.f32", DType::F32, {3, 200000}, pattern(3 * 200000 * 4, 1)));
    ts.push_back(from_bytes("b.bf16", DType::BF16, {5, 7}, pattern(70, 2)));
    ts.push_back(from_bytes("c.i32", DType::I32, {2}, pattern(8, 3)));
    ts.push_back(from_bytes("d.fp8", DType::F8_E4M3, {33}, pattern(33, 4)));
    ts.push_back(from_bytes("e.empty", DType::F32, {0, 4}, {}));
    ts.push_back(from_bytes("f.scalar", DType::F32, {}, pattern(4, 5)));
    WriteOptions w;
    w.chunk_bytes = 1 << 20;
    ThreadPool pool(3);
    w.pool = &pool;
    uint64_t last_progress = 0;
    w.progress = [&](uint64_t done) { last_progress = done; };
    const fs::path path = dir / "x.safetensors";
    const uint64_t size = write_safetensors(path.string(), ts, w);
    EXPECT_EQ(size, fs::file_size(path));
    EXPECT_FALSE(fs::exists(dir / "x.safetensors.partial"));

    SafetensorsFile f(path.string());
    EXPECT_EQ(f.header().data_offset % 8, 0u);
    EXPECT_EQ(f.header().metadata.at("format"), "pt");
    uint64_t total = 0;
    for (const auto& t : ts) {
        const TensorInfo* info = f.find(t.name);
        ASSERT_NE(info, nullptr) << t.name;
        EXPECT_EQ(info->dtype, t.dtype);
        EXPECT_EQ(info->shape, t.shape);
        EXPECT_EQ(info->begin % dtype_size_bytes(t.dtype), 0u) << t.name;
        std::vector<uint8_t> want(t.nbytes());
        if (!want.empty()) t.fill(0, want.data(), want.size());
        TensorView v = f.view(*info);
        ASSERT_EQ(v.nbytes(), want.size());
        if (!want.empty()) {
            EXPECT_EQ(std::memcmp(v.data, want.data(), want.size()), 0) << t.name;
        }
        total += t.nbytes();
    }
    EXPECT_EQ(last_progress, total);
    // The header is padded with spaces (as the reference writer does).
    const std::string raw = read_file(path);
    EXPECT_EQ(raw[f.header().data_offset - 1] == ' ' || raw[f.header().data_offset - 1] == '}', true);
    fs::remove_all(dir);
}

TEST(SafetensorsWriter, ReordersWhenAlignmentWouldBreak) {
    const fs::path dir = temp_dir("align");
    std::vector<TensorToWrite> ts;
    ts.push_back(from_bytes("a.u8", DType::U8, {3}, pattern(3, 1)));
    ts.push_back(from_bytes("b.f32", DType::F32, {2}, pattern(8, 2)));
    ts.push_back(from_bytes("c.bf16", DType::BF16, {1}, pattern(2, 3)));
    write_safetensors((dir / "a.safetensors").string(), ts);
    SafetensorsFile f((dir / "a.safetensors").string());
    EXPECT_EQ(f.find("b.f32")->begin % 4, 0u);
    EXPECT_EQ(f.find("c.bf16")->begin % 2, 0u);
    EXPECT_EQ(std::memcmp(f.view(*f.find("a.u8")).data, pattern(3, 1).data(), 3), 0);
    fs::remove_all(dir);
}

TEST(SafetensorsWriter, RejectsBadInputAndLeavesNoPartialFile) {
    const fs::path dir = temp_dir("bad");
    std::vector<TensorToWrite> dup;
    dup.push_back(from_bytes("a", DType::U8, {1}, {1}));
    dup.push_back(from_bytes("a", DType::U8, {1}, {2}));
    EXPECT_THROW(write_safetensors((dir / "d.safetensors").string(), dup), Error);
    std::vector<TensorToWrite> boom;
    boom.push_back({"x", DType::F32, {4}, [](uint64_t, uint8_t*, uint64_t) { fail("generator failed"); }});
    EXPECT_THROW(write_safetensors((dir / "e.safetensors").string(), boom), Error);
    EXPECT_THROW(write_safetensors((dir / "no_such_dir" / "f.safetensors").string(), dup), Error);
    EXPECT_TRUE(fs::is_empty(dir));
    fs::remove_all(dir);
}

TEST(SafetensorsWriter, ShardsWithIndexLoadThroughCheckpoint) {
    const fs::path dir = temp_dir("shard");
    std::vector<TensorToWrite> ts;
    for (int i = 0; i < 7; ++i) {
        std::string name = "t";
        name += char('0' + i);
        ts.push_back(from_bytes(name, DType::BF16, {100, 10}, pattern(2000, uint8_t(i))));
    }
    const ShardedResult r = write_sharded_safetensors(dir.string(), ts, 4500);  // two tensors per shard
    ASSERT_EQ(r.files.size(), 5u);
    EXPECT_EQ(r.files[0], "model-00001-of-00004.safetensors");
    EXPECT_EQ(r.files[3], "model-00004-of-00004.safetensors");
    EXPECT_EQ(r.tensor_bytes, 14000u);
    const auto index = nlohmann::json::parse(read_file(dir / "model.safetensors.index.json"));
    EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), 14000u);
    EXPECT_EQ(index["weight_map"]["t6"].get<std::string>(), "model-00004-of-00004.safetensors");
    Checkpoint ck(dir.string());
    EXPECT_EQ(ck.names().size(), 7u);
    EXPECT_EQ(ck.files().size(), 4u);
    EXPECT_EQ(std::memcmp(ck.get("t5", {100, 10}).data, pattern(2000, 5).data(), 2000), 0);
    // Everything fits: a single model.safetensors and no index, as the hub does.
    const fs::path one = temp_dir("one");
    EXPECT_EQ(write_sharded_safetensors(one.string(), ts, 1 << 20).files,
              std::vector<std::string>{"model.safetensors"});
    EXPECT_FALSE(fs::exists(one / "model.safetensors.index.json"));
    EXPECT_EQ(Checkpoint(one.string()).names().size(), 7u);
    fs::remove_all(dir);
    fs::remove_all(one);
}

TEST(Synth, KimiK2Bf16LoadsWithHubNamesAndShapes) {
    const fs::path dir = temp_dir("k2");
    const SynthResult r = synth_checkpoint(small("kimi-k2", "bf16", dir));
    EXPECT_GT(r.bytes_written, 0u);
    const JsonObject cfg = JsonObject::load_file((dir / "config.json").string());
    EXPECT_EQ(cfg.get_string("model_type"), "deepseek_v3");  // transformers 5 has no kimi_k2 config
    EXPECT_EQ(cfg.get_string_list("architectures"), std::vector<std::string>{"DeepseekV3ForCausalLM"});
    EXPECT_EQ(cfg.get_int("num_hidden_layers"), 2);
    EXPECT_EQ(cfg.get_int("n_routed_experts"), 4);
    EXPECT_EQ(cfg.get_int("num_experts_per_tok"), 4);  // clamped from 8
    EXPECT_EQ(cfg.get_int("first_k_dense_replace"), 1);
    EXPECT_EQ(cfg.get_int("hidden_size"), 7168 / 32);
    EXPECT_EQ(cfg.get_int("num_attention_heads"), 2);
    EXPECT_EQ(cfg.get_int("n_group"), 1);
    EXPECT_DOUBLE_EQ(cfg.get_float("routed_scaling_factor"), 2.827);
    EXPECT_DOUBLE_EQ(cfg.get_float("rope_theta"), 50000.0);
    EXPECT_FALSE(cfg.has("quantization_config"));
    const RopeParameters rope = parse_rope_parameters(cfg);
    EXPECT_EQ(rope.rope_type, "yarn");
    EXPECT_DOUBLE_EQ(rope.factor, 32.0);
    EXPECT_EQ(rope.original_max_position_embeddings, 4096);

    const int64_t h = 224, H = 2, qk = 16 + 8, ql = 64, kvl = 32, m = 64, inter = 576, V = 512;
    Checkpoint ck(dir.string());
    EXPECT_EQ(ck.get("model.embed_tokens.weight", {V, h}).dtype(), DType::BF16);
    EXPECT_EQ(ck.get("lm_head.weight", {V, h}).dtype(), DType::BF16);
    ck.get("model.norm.weight", {h});
    ck.get("model.layers.0.self_attn.q_a_proj.weight", {ql, h});
    ck.get("model.layers.0.self_attn.q_b_proj.weight", {H * qk, ql});
    ck.get("model.layers.0.self_attn.kv_a_proj_with_mqa.weight", {kvl + 8, h});
    ck.get("model.layers.0.self_attn.kv_b_proj.weight", {H * (16 + 16), kvl});
    ck.get("model.layers.0.self_attn.o_proj.weight", {h, H * 16});
    ck.get("model.layers.0.mlp.gate_proj.weight", {inter, h});
    ck.get("model.layers.0.mlp.down_proj.weight", {h, inter});
    EXPECT_FALSE(ck.has("model.layers.0.mlp.gate.weight"));
    ck.get("model.layers.1.mlp.gate.weight", {4, h});
    EXPECT_EQ(ck.get("model.layers.1.mlp.gate.e_score_correction_bias", {4}).dtype(), DType::F32);
    ck.get("model.layers.1.mlp.experts.3.up_proj.weight", {m, h});
    ck.get("model.layers.1.mlp.experts.3.down_proj.weight", {h, m});
    ck.get("model.layers.1.mlp.shared_experts.gate_proj.weight", {m, h});
    EXPECT_FALSE(ck.has("model.layers.1.mlp.experts.4.up_proj.weight"));
    EXPECT_EQ(ck.names().size(), 1u + 9 + 3 + 9 + 2 + 12 + 3 + 2);

    // Norms are near 1; linear weights have std ~ 1/sqrt(fan_in).
    auto w = ck.get("model.layers.1.mlp.experts.0.gate_proj.weight");
    const auto* p = reinterpret_cast<const uint16_t*>(w.data);
    double ss = 0;
    for (int64_t i = 0; i < m * h; ++i) ss += double(bf16_to_f32(p[i])) * bf16_to_f32(p[i]);
    EXPECT_NEAR(std::sqrt(ss / double(m * h)) * std::sqrt(double(h)), 1.0, 0.05);
    auto n = ck.get("model.layers.1.input_layernorm.weight");
    for (int64_t i = 0; i < h; ++i) EXPECT_NEAR(bf16_to_f32(reinterpret_cast<const uint16_t*>(n.data)[i]), 1.0, 0.11);

    // Tokenizer files are valid JSON, and the tokenizer fits the vocabulary.
    const auto tok = nlohmann::json::parse(read_file(dir / "tokenizer.json"));
    EXPECT_EQ(tok["model"]["type"], "BPE");
    EXPECT_EQ(int64_t(tok["model"]["vocab"].size()), synth::synth_tokenizer_vocab_size());
    EXPECT_LE(synth::synth_tokenizer_vocab_size(), V);
    for (const auto& mg : tok["model"]["merges"]) {
        const std::string s = mg.get<std::string>();
        const auto sp = s.find(' ');
        EXPECT_TRUE(tok["model"]["vocab"].contains(s.substr(0, sp)) && tok["model"]["vocab"].contains(s.substr(sp + 1)));
        EXPECT_TRUE(tok["model"]["vocab"].contains(s.substr(0, sp) + s.substr(sp + 1))) << s;
    }
    const auto tc = nlohmann::json::parse(read_file(dir / "tokenizer_config.json"));
    EXPECT_TRUE(tc["chat_template"].is_string());
    EXPECT_EQ(tc["eos_token"], "<|eos|>");
    fs::remove_all(dir);
}

TEST(Synth, DeepseekV3GroupsAndDenseLayersAreClamped) {
    const fs::path dir = temp_dir("ds");
    SynthOptions o = small("deepseek-v3", "bf16", dir);
    o.layers = 3;
    o.experts = 8;
    const SynthPlan p = plan_synth(o);
    EXPECT_EQ(p.dims.first_k_dense_replace, 2);  // 3 clamped so one MoE layer remains
    EXPECT_EQ(p.dims.n_group, 4);                // 8 groups of one expert would break top-2 group scores
    EXPECT_EQ(p.dims.topk_group, 4);             // 4 groups x 2 experts are needed for top-8
    EXPECT_EQ(p.dims.num_attention_heads, 4);
    EXPECT_EQ(p.dims.vocab_size, 512);
    const auto cfg = nlohmann::json::parse(p.config_json);
    EXPECT_EQ(cfg["model_type"], "deepseek_v3");
    EXPECT_EQ(cfg["rope_scaling"]["factor"], 40);
    EXPECT_EQ(cfg["rope_scaling"]["beta_fast"], 32);
    EXPECT_EQ(cfg["bos_token_id"], synth::kSynthBosId);
    for (const char* f : {"topk_method", "scoring_func", "norm_topk_prob", "kv_lora_rank", "q_lora_rank",
                          "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "moe_layer_freq", "n_shared_experts",
                          "num_key_value_heads", "rms_norm_eps", "max_position_embeddings", "tie_word_embeddings",
                          "hidden_act", "attention_bias", "intermediate_size", "moe_intermediate_size"})
        EXPECT_TRUE(cfg.contains(f)) << f;
}

TEST(Synth, Fp8AndInt4ScaleShapesAreConsistent) {
    for (const std::string dt : {"fp8", "int4"}) {
        const fs::path dir = temp_dir("q" + dt);
        SynthOptions o = small("kimi-k2", dt, dir);
        o.shard_bytes = 1 << 20;
        synth_checkpoint(o);
        Checkpoint ck(dir.string());
        EXPECT_TRUE(fs::exists(dir / "model.safetensors.index.json"));
        const auto cfg = nlohmann::json::parse(read_file(dir / "config.json"));
        int quantized = 0;
        for (const auto& name : ck.names()) {
            const std::string suffix_inv = ".weight_scale_inv", suffix_packed = ".weight_packed";
            if (name.size() > suffix_inv.size() && name.ends_with(suffix_inv)) {
                const auto w = ck.get(name.substr(0, name.size() - suffix_inv.size()) + ".weight");
                EXPECT_EQ(w.dtype(), DType::F8_E4M3) << name;
                const auto s = ck.get(name);
                EXPECT_EQ(s.dtype(), DType::F32);
                EXPECT_EQ(s.shape(), (std::vector<int64_t>{(w.shape()[0] + 127) / 128, (w.shape()[1] + 127) / 128}));
                ++quantized;
            } else if (name.ends_with(suffix_packed)) {
                const std::string base = name.substr(0, name.size() - suffix_packed.size());
                EXPECT_NE(base.find(".mlp.experts."), std::string::npos) << name;
                const auto pk = ck.get(name);
                const auto sc = ck.get(base + ".weight_scale");
                const auto shp = ck.get(base + ".weight_shape", {2});
                EXPECT_EQ(pk.dtype(), DType::I32);
                EXPECT_EQ(sc.dtype(), DType::BF16);
                const auto* dims = reinterpret_cast<const int32_t*>(shp.data);
                EXPECT_EQ(pk.shape(), (std::vector<int64_t>{dims[0], dims[1] / 8}));
                EXPECT_EQ(sc.shape(), (std::vector<int64_t>{dims[0], dims[1] / 32}));
                ++quantized;
            }
        }
        if (dt == "fp8") {
            EXPECT_EQ(quantized, 5 + 5 + 3 + 3 * 4 + 3);  // attention x2, dense MLP, experts, shared
            EXPECT_EQ(cfg["quantization_config"]["quant_method"], "fp8");
            EXPECT_EQ(ck.get("model.layers.1.mlp.gate.weight").dtype(), DType::BF16);
            // No NaN codes (S.1111.111).
            auto w = ck.get("model.layers.1.mlp.experts.2.down_proj.weight");
            for (uint64_t i = 0; i < w.nbytes(); ++i) ASSERT_NE(w.data[i] & 0x7f, 0x7f);
        } else {
            EXPECT_EQ(quantized, 3 * 4);
            EXPECT_EQ(cfg["quantization_config"]["format"], "pack-quantized");
            EXPECT_EQ(cfg["quantization_config"]["config_groups"]["group_0"]["weights"]["group_size"], 32);
            EXPECT_EQ(ck.get("model.layers.1.self_attn.o_proj.weight").dtype(), DType::BF16);
        }
        fs::remove_all(dir);
    }
}

TEST(Synth, SameSeedSameBytesAcrossThreadCounts) {
    const fs::path a = temp_dir("seed_a"), b = temp_dir("seed_b"), c = temp_dir("seed_c");
    ThreadPool one(1), three(3);
    SynthOptions o = small("kimi-k2", "fp8", a);
    o.pool = &one;
    synth_checkpoint(o);
    o.out_dir = b.string();
    o.pool = &three;
    synth_checkpoint(o);
    o.out_dir = c.string();
    o.seed = 8;
    synth_checkpoint(o);
    const std::string fa = read_file(a / "model.safetensors"), fb = read_file(b / "model.safetensors"),
                      fc = read_file(c / "model.safetensors");
    EXPECT_GT(fa.size(), 1000000u);
    EXPECT_TRUE(fa == fb);
    ASSERT_EQ(fa.size(), fc.size());
    EXPECT_FALSE(fa == fc);
    // Different seeds differ in every large tensor, not just somewhere.
    Checkpoint ca(a.string()), cc(c.string());
    for (const auto& name : ca.names()) {
        const auto x = ca.get(name), y = cc.get(name);
        if (x.nbytes() >= 64 && !name.ends_with("_scale_inv")) {
            EXPECT_NE(std::memcmp(x.data, y.data, x.nbytes()), 0) << name;
        }
    }
    for (const auto& p : {a, b, c}) fs::remove_all(p);
}

TEST(Synth, RejectsBadOptionsAndNonEmptyFolders) {
    const fs::path dir = temp_dir("errs");
    auto expect_error = [&](SynthOptions o, const std::string& needle) {
        try {
            synth_checkpoint(o);
            ADD_FAILURE() << "expected an error mentioning " << needle;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    SynthOptions o = small("kimi-k2", "bf16", dir / "m");
    SynthOptions bad = o;
    bad.like = "llama";
    expect_error(bad, "unknown model 'llama'");
    bad = o;
    bad.expert_dtype = "int3";
    expect_error(bad, "unknown expert dtype 'int3'");
    bad = o;
    bad.layers = 0;
    expect_error(bad, "--layers");
    bad = o;
    bad.experts = -2;
    expect_error(bad, "--experts");
    bad = o;
    bad.scale_down = 0;
    expect_error(bad, "--scale-down");
    bad = o;
    bad.out_dir = "";
    expect_error(bad, "no output folder");
    std::ofstream((dir / "file")) << "x";
    bad = o;
    bad.out_dir = (dir / "file").string();
    expect_error(bad, "not a folder");

    // A sharded checkpoint, then a --force rewrite with fewer shards: stale shards are removed, others kept.
    o.shard_bytes = 1 << 20;
    synth_checkpoint(o);
    std::ofstream((dir / "m" / "notes.txt")) << "keep me";
    expect_error(o, "not empty");
    o.force = true;
    o.shard_bytes = 0;
    synth_checkpoint(o);
    int shards = 0;
    for (const auto& e : fs::directory_iterator(dir / "m")) shards += e.path().filename().string().starts_with("model-");
    EXPECT_EQ(shards, 0);
    EXPECT_FALSE(fs::exists(dir / "m" / "model.safetensors.index.json"));
    EXPECT_TRUE(fs::exists(dir / "m" / "notes.txt"));
    EXPECT_NO_THROW(Checkpoint((dir / "m").string()));
    fs::remove_all(dir);
}

TEST(Synth, CliReportsErrorsAndWrites) {
    if (!fs::exists(SLUICE_BINARY)) GTEST_SKIP() << "sluice binary not built";
    const fs::path dir = temp_dir("cli");
    const std::string bin = SLUICE_BINARY;
    auto run = [&](const std::string& args) {
        return std::system((bin + " synth " + args + " >/dev/null 2>&1").c_str());
    };
    EXPECT_NE(run("--like nope --layers 1 --experts 2 -o " + (dir / "a").string()), 0);
    EXPECT_NE(run("--like kimi-k2 --layers x --experts 2 -o " + (dir / "a").string()), 0);
    EXPECT_NE(run("--like kimi-k2 --layers 1 --experts 2 --seed -1 -o " + (dir / "a").string()), 0);
    EXPECT_EQ(run("--like kimi-k2 --layers 1 --experts 2 --scale-down 64 --no-sync -o " + (dir / "a").string()), 0);
    EXPECT_NO_THROW(Checkpoint((dir / "a").string()));
    EXPECT_NE(run("--like kimi-k2 --layers 1 --experts 2 --scale-down 64 -o " + (dir / "a").string()), 0);
    EXPECT_EQ(run("--like kimi-k2 --layers 1 --experts 2 --scale-down 64 --force -o " + (dir / "a").string()), 0);
    fs::remove_all(dir);
}

TEST(Synth, KimiK3Mxfp4RosterAndSchedule) {
    const fs::path dir = temp_dir("k3");
    SynthOptions o = small("kimi-k3", "mxfp4", dir);
    o.layers = 5;
    synth_checkpoint(o);
    const auto cfg = nlohmann::json::parse(read_file(dir / "config.json"));
    EXPECT_EQ(cfg["model_type"], "kimi_k3");
    EXPECT_EQ(cfg["quantization_config"]["format"], "mxfp4-pack-quantized");
    const auto& lin = cfg["text_config"]["linear_attn_config"];
    EXPECT_EQ(lin["kda_layers"], nlohmann::json({1, 2, 3}));
    EXPECT_EQ(lin["full_attn_layers"], nlohmann::json({4, 5}));  // every 4th plus the last
    Checkpoint ck(dir.string());
    const std::string g = "language_model.model.layers.";
    const int64_t h = 224, lat = 128, w = 96;
    EXPECT_TRUE(ck.has(g + "0.mlp.gate_proj.weight"));
    EXPECT_TRUE(ck.has(g + "2.self_attn.A_log"));
    EXPECT_FALSE(ck.has(g + "3.self_attn.A_log"));
    EXPECT_TRUE(ck.has(g + "3.self_attn.kv_b_proj.weight"));
    EXPECT_EQ(ck.get(g + "1.self_attn.q_conv1d.weight").dtype(), DType::F32);
    EXPECT_EQ(ck.get(g + "4.block_sparse_moe.experts.3.w1.weight_packed", {w, lat / 2}).dtype(), DType::U8);
    EXPECT_EQ(ck.get(g + "4.block_sparse_moe.experts.3.w2.weight_scale", {lat, w / 32}).dtype(), DType::U8);
    ck.get(g + "4.block_sparse_moe.routed_expert_down_proj.weight", {lat, h});
    ck.get("language_model.model.output_attn_res_proj.weight", {1, h});
    ck.get("language_model.lm_head.weight", {512, h});
    // E8M0 scales stay near 2^-7..2^-5 for fan-in 96-128 (never 0xFF = NaN).
    auto s = ck.get(g + "4.block_sparse_moe.experts.0.w1.weight_scale");
    for (uint64_t i = 0; i < s.nbytes(); ++i) EXPECT_TRUE(s.data[i] > 115 && s.data[i] < 127) << int(s.data[i]);
    o.expert_dtype = "int4";
    EXPECT_THROW(plan_synth(o), Error);
    fs::remove_all(dir);
}

// Qwen3-MoE and Mixtral: the released dimensions scaled down, hub names, and the folder loads and runs through the
// engine (finite logits; experts streamed from the file give the same bits as the memory map).
TEST(Synth, Qwen3MoeAndMixtralLoadAndRun) {
    struct Case {
        const char* like;
        const char* dtype;
        const char* arch;
        const char* expert_gate;  // layer-1 expert 3 gate projection (without ".weight")
        int64_t hidden, heads, kv_heads, head_dim, inter, top_k, vocab;
    } cases[] = {
        {"qwen3-moe", "bf16", "Qwen3MoeForCausalLM", "model.layers.1.mlp.experts.3.gate_proj", 64, 1, 1, 16, 32, 4,
         512},
        {"qwen3-moe", "fp8", "Qwen3MoeForCausalLM", "model.layers.1.mlp.experts.3.gate_proj", 64, 1, 1, 16, 32, 4,
         512},
        {"mixtral", "bf16", "MixtralForCausalLM", "model.layers.1.block_sparse_moe.experts.3.w1", 128, 1, 1, 16, 448,
         2, 512},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(std::string(c.like) + " " + c.dtype);
        const fs::path dir = temp_dir(std::string(c.like) + c.dtype);
        synth_checkpoint(small(c.like, c.dtype, dir));
        const JsonObject cfg = JsonObject::load_file((dir / "config.json").string());
        EXPECT_EQ(cfg.get_string_list("architectures"), std::vector<std::string>{c.arch});
        EXPECT_EQ(cfg.get_int("hidden_size"), c.hidden);
        EXPECT_EQ(cfg.get_int("num_attention_heads"), c.heads);
        EXPECT_EQ(cfg.get_int("num_key_value_heads"), c.kv_heads);
        EXPECT_EQ(cfg.get_int("num_experts_per_tok"), c.top_k);
        EXPECT_DOUBLE_EQ(cfg.get_float("rope_theta"), 1e6);
        Checkpoint ck(dir.string());
        ck.get(std::string(c.expert_gate) + ".weight", {c.inter, c.hidden});
        ck.get("model.layers.0.self_attn.q_proj.weight", {c.heads * c.head_dim, c.hidden});
        ck.get("model.layers.0.self_attn.k_proj.weight", {c.kv_heads * c.head_dim, c.hidden});
        ck.get("lm_head.weight", {c.vocab, c.hidden});
        EXPECT_EQ(ck.has("model.layers.0.self_attn.q_norm.weight"), std::string(c.like) == "qwen3-moe");

        auto model = load_model(dir.string(), {.n_threads = 2});
        EXPECT_EQ(model->info().architecture, c.arch);
        EXPECT_EQ(model->info().n_moe_layers, 2);
        EXPECT_EQ(model->info().n_routed_experts, 4);
        const std::vector<int32_t> ids = {5, 17, 300, 42, 9, 511, 3};
        const auto logits = prompt_logits(*model, ids, 3);
        ASSERT_EQ(logits.size(), ids.size() * size_t(c.vocab));
        for (float v : logits) ASSERT_TRUE(std::isfinite(v));
        auto streamed = load_model(dir.string(), {.n_threads = 2, .stream_experts = true});
        EXPECT_EQ(prompt_logits(*streamed, ids, 4096), logits);
        fs::remove_all(dir);
    }
}

TEST(Synth, GptOssMxfp4PlanAndLoad) {
    // Full gpt-oss-20b dimensions (planned only): hidden 2880, 64/8 heads of 64, vocab 201088, 32 experts top-4.
    SynthOptions full = full_size("gpt-oss", 24, 32, 201088);
    const SynthPlan plan = plan_synth(full);
    EXPECT_EQ(plan.dtype, SynthDType::Mxfp4);
    EXPECT_EQ(plan.dims.hidden_size, 2880);
    EXPECT_EQ(plan.dims.num_attention_heads, 64);
    EXPECT_EQ(plan.dims.num_key_value_heads, 8);
    EXPECT_EQ(plan.dims.head_dim, 64);
    EXPECT_EQ(plan.dims.vocab_size, 201088);
    EXPECT_EQ(plan.dims.num_experts_per_tok, 4);
    EXPECT_EQ(plan.dims.sliding_window, 128);
    bool found = false;
    for (const auto& t : plan.tensors)
        if (t.name == "model.layers.23.mlp.experts.gate_up_proj_blocks") {
            EXPECT_EQ(t.shape, (std::vector<int64_t>{32, 5760, 90, 16}));
            found = true;
        }
    EXPECT_TRUE(found);
    const auto cfg = nlohmann::json::parse(plan.config_json);
    EXPECT_EQ(cfg["layer_types"][0], "sliding_attention");
    EXPECT_EQ(cfg["layer_types"][23], "full_attention");
    full.expert_dtype = "bf16";
    EXPECT_THROW(plan_synth(full), Error);

    // A small one loads through the gpt-oss model and streams.
    const fs::path dir = temp_dir("gptoss");
    SynthOptions o = small("gpt-oss", "", dir);
    o.layers = 3;
    synth_checkpoint(o);
    Checkpoint ck(dir.string());
    EXPECT_EQ(ck.get("model.layers.1.mlp.experts.down_proj_scales", {4, 96, 3}).dtype(), DType::U8);
    auto s = ck.get("model.layers.0.mlp.experts.gate_up_proj_scales");
    for (uint64_t i = 0; i < s.nbytes(); ++i) EXPECT_TRUE(s.data[i] > 115 && s.data[i] < 127) << int(s.data[i]);
    auto model = load_model(dir.string(), {.n_threads = 2});
    EXPECT_EQ(model->info().architecture, "GptOssForCausalLM");
    const std::vector<int32_t> ids = {5, 17, 300, 42, 9, 77, 120, 3, 8, 250, 11, 60};
    const auto logits = prompt_logits(*model, ids, 5);
    ASSERT_EQ(logits.size(), ids.size() * size_t(model->info().vocab_size));
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
    auto streamed = load_model(dir.string(), {.n_threads = 2, .stream_experts = true});
    EXPECT_EQ(prompt_logits(*streamed, ids, 4096), logits);
    fs::remove_all(dir);
}

// Kimi Linear: the release's dimensions and layer schedule at full size (planned only), and a scaled-down folder
// that loads through KimiLinearForCausalLM, runs with finite logits and streams experts to the same bits.
TEST(Synth, KimiLinearPlanLoadAndRun) {
    SynthOptions full = full_size("kimi-linear", 27, 256, 163840);
    const SynthPlan plan = plan_synth(full);
    EXPECT_EQ(plan.dims.hidden_size, 2304);
    EXPECT_EQ(plan.dims.vocab_size, 163840);
    EXPECT_EQ(plan.dims.num_experts_per_tok, 8);
    const auto fc = nlohmann::json::parse(plan.config_json);
    EXPECT_EQ(fc["architectures"], nlohmann::json({"KimiLinearForCausalLM"}));
    EXPECT_EQ(fc["linear_attn_config"]["full_attn_layers"], nlohmann::json({4, 8, 12, 16, 20, 24, 27}));
    EXPECT_EQ(fc["linear_attn_config"]["kda_layers"].size(), 20u);
    EXPECT_TRUE(fc["q_lora_rank"].is_null());
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const auto& t : plan.tensors) shapes[t.name] = t.shape;
    const std::string l0 = "model.layers.0.self_attn.", l3 = "model.layers.3.self_attn.";
    EXPECT_EQ(shapes[l0 + "q_proj.weight"], (std::vector<int64_t>{4096, 2304}));
    EXPECT_EQ(shapes[l0 + "q_conv1d.weight"], (std::vector<int64_t>{4096, 1, 4}));
    EXPECT_EQ(shapes[l0 + "A_log"], (std::vector<int64_t>{1, 1, 32, 1}));
    EXPECT_EQ(shapes[l0 + "g_a_proj.weight"], (std::vector<int64_t>{128, 2304}));
    EXPECT_EQ(shapes[l3 + "q_proj.weight"], (std::vector<int64_t>{32 * 192, 2304}));
    EXPECT_EQ(shapes[l3 + "kv_a_proj_with_mqa.weight"], (std::vector<int64_t>{576, 2304}));
    EXPECT_EQ(shapes[l3 + "kv_b_proj.weight"], (std::vector<int64_t>{32 * 256, 512}));
    EXPECT_EQ(shapes["model.layers.0.mlp.gate_proj.weight"], (std::vector<int64_t>{9216, 2304}));
    EXPECT_EQ(shapes["model.layers.26.block_sparse_moe.experts.255.w2.weight"], (std::vector<int64_t>{2304, 1024}));
    EXPECT_EQ(shapes["model.layers.26.block_sparse_moe.shared_experts.up_proj.weight"],
              (std::vector<int64_t>{1024, 2304}));
    EXPECT_FALSE(shapes.count(l3 + "A_log"));
    full.expert_dtype = "mxfp4";
    EXPECT_THROW(plan_synth(full), Error);

    for (const char* dtype : {"bf16", "f32", "fp8"}) {
        SCOPED_TRACE(dtype);
        const std::string dt = dtype;
        const fs::path dir = temp_dir("kl" + dt);
        SynthOptions o = small("kimi-linear", dtype, dir);
        o.layers = 5;
        o.experts = 16;
        o.scale_down = 16;
        synth_checkpoint(o);
        const auto cfg = nlohmann::json::parse(read_file(dir / "config.json"));
        EXPECT_EQ(cfg["linear_attn_config"]["kda_layers"], nlohmann::json({1, 2, 3}));
        EXPECT_EQ(cfg["linear_attn_config"]["full_attn_layers"], nlohmann::json({4, 5}));  // every 4th plus the last
        Checkpoint ck(dir.string());
        EXPECT_EQ(ck.get("model.layers.2.block_sparse_moe.experts.15.w1.weight", {64, 160}).dtype(),
                  dt == "f32" ? DType::F32 : dt == "fp8" ? DType::F8_E4M3 : DType::BF16);
        EXPECT_EQ(ck.has("model.layers.0.self_attn.g_b_proj.weight_scale_inv"), dt == "fp8");
        auto model = load_model(dir.string(), {.n_threads = 2});
        EXPECT_EQ(model->info().architecture, "KimiLinearForCausalLM");
        EXPECT_EQ(model->info().n_moe_layers, 4);
        EXPECT_EQ(model->info().n_routed_experts, 16);
        EXPECT_EQ(model->info().vocab_size, 512);
        const std::vector<int32_t> ids = {5, 17, 300, 42, 9, 511, 3};
        const auto logits = prompt_logits(*model, ids, 3);
        ASSERT_EQ(logits.size(), ids.size() * size_t(512));
        for (float v : logits) ASSERT_TRUE(std::isfinite(v));
        auto streamed = load_model(dir.string(), {.n_threads = 2, .stream_experts = true});
        EXPECT_EQ(prompt_logits(*streamed, ids, 3), logits);
        fs::remove_all(dir);
    }
}
