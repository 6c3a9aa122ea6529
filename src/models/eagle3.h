// Kimi K3's EAGLE-3 drafter (lightseekorg/kimi-k3-eagle3.1-mla; vLLM's Eagle3DeepseekV2ForCausalLM, the layout
// docs/speculation.md records with its sources): one DeepSeek-V2 MLA decoder layer that reads the target's hidden
// states and drafts autoregressively, feeding its own hidden state back.
//
//  Row p (position p) pairs the target's taps at p (the residual stream after the tapped layers) with the token at
//  p + 1 (the one that followed):
//  1. g = fc([fc_norm.0(tap_0) ; fc_norm.1(tap_1) ; ...]) (without fc_norm: fc of the taps side by side).
//  2. x = [input_layernorm(embed(token)) ; hidden_norm(g)] (2 x hidden); residual = g (hidden_norm(g) with
//     norm_before_residual).
//  3. h = residual + MLA(x) (causal, its own cache: q_a_proj and kv_a_proj_with_mqa read the 2 x hidden input);
//     h += mlp(post_attention_layernorm(h)) (SiLU-GLU); out = norm(h); logits = lm_head(out) (its own head).
//  4. Drafting: the last committed row's logits give draft 1; draft i + 1 comes from a row at the next position that
//     pairs draft i with the previous row's hidden state in place of g (out with norm_output, else h).
// The target's embedding is used (the release's embed_tokens is a copy of it; checked for shape, not read).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "formats/checkpoint.h"
#include "models/blocks/mla.h"
#include "models/blocks/moe.h"
#include "models/blocks/rope.h"
#include "models/draft_pick.h"
#include "models/model.h"
#include "ops/exec_context.h"
#include "state/caches.h"

namespace sluice {

struct Eagle3Config {
    int64_t hidden_size = 0, intermediate_size = 0, num_hidden_layers = 0, vocab_size = 0, draft_vocab_size = 0;
    int64_t target_hidden_size = 0;
    // eagle_config.eagle_aux_hidden_state_layer_ids: one-based, id k is the hidden state entering the target's
    // layer k, i.e. the output of zero-based layer k - 1 (the release: [2, 46, 90] of K3's 93 layers)
    std::vector<int64_t> aux_layer_ids;
    bool fc_norm = false, norm_output = false, norm_before_residual = false;
    double rms_norm_eps = 1e-5;
    int64_t max_position_embeddings = 0;
    MlaConfig mla;
    RopeParameters rope;
    int64_t tap_width() const { return target_hidden_size * int64_t(aux_layer_ids.size()); }
    // the zero-based layers whose output the target taps (Model::set_hidden_taps)
    std::vector<int64_t> tapped_layers() const;
};

// True when DIR/config.json describes an EAGLE-3 MLA drafter (architectures Eagle3DeepseekV2ForCausalLM or its
// alias Eagle3DeepseekV3ForCausalLM).
bool is_eagle3_checkpoint(const std::string& dir);

class Eagle3Model {
public:
    // Reads DIR (config.json, safetensors) and checks it against the target: hidden_size and target_hidden_size
    // equal the target's, vocab_size the target's vocabulary, draft_vocab_size at most that (below it, tensor d2t
    // maps the head's ids to the target's, each inside the vocabulary), one layer, every aux layer id within [1, the
    // target's layers]. Errors name the file and field or tensor. Its passes run in a context of its
    // own (n_threads threads, the process default backend at load).
    static std::unique_ptr<Eagle3Model> load(const std::string& dir, const Model& target, int n_threads = 0);

    const Eagle3Config& config() const { return cfg_; }

    // One request's draft context: the layer's MLA cache, committed rows only between calls.
    struct Seq {
        MlaCache cache;
        int64_t rows() const { return cache.data.rows(); }
        void truncate(int64_t n) { cache.data.truncate(n); }
    };
    Seq new_seq() const;

    struct Chain {
        std::vector<int32_t> drafts;  // d_1.. (n_drafts of them)
        std::vector<float> logits;    // [n_drafts, draft_vocab_size]: d_i is their argmax (through d2t)
    };
    // Appends n >= 1 committed rows at positions seq.rows().. (taps [n, tap_width()], next[i] the token after row i's
    // position) and drafts n_drafts tokens from the last of them (step 4). The chain's rows leave the cache again.
    // pick: how d_i comes from its logits (null: the argmax, through d2t).
    Chain propose(Seq& seq, const float* taps, const int32_t* next, int64_t n, int64_t n_drafts,
                  const DraftPick* pick = nullptr);

private:
    Eagle3Model(const std::string& dir, Eagle3Config cfg, const Model& target, int n_threads);
    // g[k, hidden] = fc of the taps [k, tap_width] (per-tap norms into `normed` first, with fc_norm)
    void fuse(const float* taps, int64_t k, float* normed, float* g);
    // x[k, 2 hidden] and the residual[k, hidden] of k rows from their tokens and fused (or fed back) hidden rows g
    void layer_input(const int32_t* tokens, const float* g, int64_t k, float* x, float* residual);
    // the layer for one row at pos from its input x and residual h (h becomes the layer's output): the head's input
    // (out) and the hidden state fed back (feed)
    void layer_row(const float* x, float* h, int64_t pos, Seq& seq, float* out, float* feed);
    void load_d2t();
    Checkpoint ck_;
    Eagle3Config cfg_;
    const Weight* embed_;  // the target's
    Weight fc_, lm_head_;
    std::vector<int64_t> d2t_;  // draft id k -> target id k + d2t_[k]; empty when the head is the target's vocabulary
    std::vector<std::vector<float>> fc_norm_;
    std::vector<float> hidden_norm_, input_layernorm_, post_attention_layernorm_, norm_;
    MlaWeights attn_;
    SwigluWeights mlp_;
    Rope rope_;
    ExecContext ctx_;
};

}  // namespace sluice
