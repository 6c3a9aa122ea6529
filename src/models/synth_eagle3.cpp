// Kimi K3's EAGLE-3 drafter for `synth --like kimi-k3-eagle3 --target K3_DIR`: the layout of
// lightseekorg/kimi-k3-eagle3.1-mla (the 19 tensors deltafin's eagle3_provider.rs pins, plus the copy of K3's
// embedding; the config fields vLLM's deepseek_eagle3.py reads; docs/speculation.md lists which are confirmed) sized
// to fit a (synthesized) K3 target: hidden size, vocabulary and the tapped layers come from the target's
// config.json, the drafter's own widths from --scale-down. One layer, whatever --layers says.
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "models/synth_roster.h"

using nlohmann::json;

namespace sluice::synth {

// The release's one-based aux ids [2, 46, 90] of K3's 93 layers (the outputs of zero-based layers 1, 45, 89), each
// layer mapped onto n layers (l * (n-1) / 92, rounded), without repeats. Identity for n = 93.
std::vector<int64_t> eagle3_aux_layer_ids(int64_t n_target_layers) {
    std::vector<int64_t> ids;
    for (int64_t layer : {1, 45, 89}) {
        const int64_t m = int64_t(std::lround(double(layer) * double(n_target_layers - 1) / 92.0));
        const int64_t id = std::clamp<int64_t>(m, 0, n_target_layers - 1) + 1;
        if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    }
    std::sort(ids.begin(), ids.end());
    return ids;
}

Eagle3Synth eagle3_plan(const SynthOptions& o) {
    Eagle3Synth s;
    s.dims = k3_draft_dims(o, "kimi-k3-eagle3");
    const K3DraftDims& t = s.dims;
    s.intermediate_size = scaled_dim(18432, o.scale_down, 32, 64);
    s.aux_layer_ids = eagle3_aux_layer_ids(t.target_layers);
    const int64_t h = t.hidden_size, n_aux = int64_t(s.aux_layer_ids.size());
    // a reduced head (vLLM's draft_vocab_size with d2t; the release has none): draft id d is target id
    // d * vocab / draft_vocab, which d2t records as the offset d2t[d] = target id - d
    const int64_t dv = o.draft_vocab_size > 0 ? o.draft_vocab_size : t.vocab_size;
    SLUICE_CHECK(dv <= t.vocab_size, "synth: --draft-vocab-size ", dv, " is above the target's vocabulary ",
                 t.vocab_size);
    json c = {
        {"architectures", {"Eagle3DeepseekV2ForCausalLM"}},
        {"model_type", "deepseek_v3"},
        {"hidden_size", h},
        {"intermediate_size", s.intermediate_size},
        {"num_hidden_layers", 1},
        {"hidden_act", "silu"},
        {"vocab_size", t.vocab_size},
        {"draft_vocab_size", dv},
        {"target_hidden_size", h},
        {"num_aux_hidden_states", n_aux},
        {"eagle_config", {{"eagle_aux_hidden_state_layer_ids", s.aux_layer_ids}, {"use_aux_hidden_state", true}}},
        {"fc_norm", true},
        {"norm_output", true},
        {"norm_before_residual", false},
        {"tie_word_embeddings", false},
        {"torch_dtype", "bfloat16"},
    };
    add_k3_draft_attention(c, t);
    s.config_json = c.dump(2) + "\n";

    Roster r(o.seed, SynthDType::Bf16);
    r.linear("fc", h, h * n_aux, false);
    for (int64_t i = 0; i < n_aux; ++i) r.norm("fc_norm." + std::to_string(i) + ".weight", h);
    const std::string p = "layers.0.";
    r.norm(p + "hidden_norm.weight", h);
    r.norm(p + "input_layernorm.weight", h);
    r.mla(p + "self_attn.", h, t.heads, t.q_lora_rank, t.kv_lora_rank, t.qk_nope_head_dim, t.qk_rope_head_dim,
          t.v_head_dim, false, 2 * h);
    r.norm(p + "post_attention_layernorm.weight", h);
    r.swiglu(p + "mlp.", s.intermediate_size, h);
    r.norm("norm.weight", h);
    r.lm_head("lm_head.weight", dv, h);
    if (dv < t.vocab_size) {
        const int64_t V = t.vocab_size;
        r.tensors.push_back({"d2t", DType::I64, {dv}, [dv, V](uint64_t off, uint8_t* dst, uint64_t n) {
            for (uint64_t b = 0; b < n; ++b) {
                const uint64_t at = off + b, d = at / 8;
                const int64_t v = int64_t(d) * V / dv - int64_t(d);
                dst[b] = uint8_t(uint64_t(v) >> (8 * (at % 8)));
            }
        }});
    }
    r.tensors.push_back(k3_target_embedding(o.target_dir, t.vocab_size, h));
    s.tensors = std::move(r.tensors);
    return s;
}

}  // namespace sluice::synth
