// Kimi K3's DSpark drafter (K3DSparkModel, model_type k3_dspark; Inferact/Kimi-K3-DSpark layout, K3 digest
// section 9): a small stack of MLA (q-LoRA, YaRN RoPE, interleaved pairs) + SiLU-GLU layers that reads the target's
// hidden states and proposes a block of tokens in one pass, non-causal within the block.
//
//  1. Context: for each committed target position p, the target's residual stream after the tapped layers
//     (target_layer_ids), side by side -> context_proj -> RMSNorm(context_norm); each draft layer's own
//     kv_a_proj_with_mqa of that vector (latent -> kv_a_layernorm, rope part -> YaRN RoPE at p) goes into that
//     layer's MLA cache at p. Nothing else of the context row is computed.
//  2. Block: rows at positions L..L+B-1 (L = context rows, B = block_size): the anchor token (the newest, whose
//     target hidden state is not known yet), then mask_token_id; embedded with the TARGET's embedding.
//  3. B pre-norm decoder layers (standard residual): MLA over all context rows and all block rows (each block row
//     sees the whole block), SiLU-GLU MLP; final_norm; the TARGET's LM head -> base logits U_r.
//  4. Markov head, sequential: prev = anchor; logits_r = U_r + markov_w2 . markov_w1[prev]; d_r = argmax (or a draw: DraftPick);
//     prev = d_r.
//  5. Confidence: c_r = sigmoid(proj . [final-normed h_r ; markov_w1[prev_r]] + bias) (reported, not used to cut).
// The block's cache rows are dropped after the pass: only context rows stay.
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

struct DSparkConfig {
    int64_t hidden_size = 0, intermediate_size = 0, num_hidden_layers = 0, vocab_size = 0;
    int64_t target_hidden_size = 0;
    std::vector<int64_t> target_layer_ids;
    int64_t mask_token_id = -1, markov_rank = 0, block_size = 7;
    bool enable_confidence_head = false, confidence_head_with_markov = false;
    double rms_norm_eps = 1e-5;
    int64_t max_position_embeddings = 0;
    MlaConfig mla;
    RopeParameters rope;
    int64_t context_width() const { return target_hidden_size * int64_t(target_layer_ids.size()); }
};

// True when DIR/config.json describes a DSpark drafter (model_type k3_dspark or architectures K3DSparkModel).
bool is_dspark_checkpoint(const std::string& dir);

class DSparkModel {
public:
    // Reads DIR (config.json, safetensors) and checks it against the target: hidden_size and target_hidden_size
    // equal the target's, vocab_size the target's, every target_layer_ids entry within the target's layers, and
    // the target must offer its embedding and LM head. Errors name the file and field or tensor. Its passes run in a
    // context of its own: n_threads threads, on the process default backend at load (ops/exec_context.h).
    static std::unique_ptr<DSparkModel> load(const std::string& dir, const Model& target, int n_threads = 0);

    const DSparkConfig& config() const { return cfg_; }

    // One request's draft context: each layer's MLA cache (context rows only between calls).
    struct Seq {
        std::vector<MlaCache> caches;
        int64_t rows() const { return caches.empty() ? 0 : caches[0].data.rows(); }
        void truncate(int64_t n) {
            for (auto& c : caches) c.data.truncate(n);
        }
    };
    Seq new_seq() const;

    // Appends n context rows at positions seq.rows().. from taps [n, context_width()] (step 1).
    void ingest(Seq& seq, const float* taps, int64_t n);

    struct Block {
        std::vector<int32_t> drafts;     // d_0.. (n_drafts of them)
        std::vector<float> confidence;   // c_r per draft (empty without a confidence head)
        std::vector<float> logits;       // [n_drafts, vocab]: U_r + Markov bias, the logits d_r is the argmax of
    };
    // Steps 2-5 for the anchor at position seq.rows(): one pass of block_size rows, n_drafts (<= block_size) drafts.
    // pick: how d_r comes from logits_r (null: the argmax). causal: a deliberately wrong mask (each block row sees
    // only the rows before it), for tests.
    Block propose(Seq& seq, int32_t anchor, int64_t n_drafts, const DraftPick* pick = nullptr, bool causal = false);

private:
    DSparkModel(const std::string& dir, DSparkConfig cfg, const Model& target, int n_threads);
    struct Layer {
        std::vector<float> input_layernorm, post_attention_layernorm;
        MlaWeights attn;
        SwigluWeights mlp;
    };
    Checkpoint ck_;
    DSparkConfig cfg_;
    const Weight* embed_;    // the target's
    const Weight* lm_head_;  // the target's
    Weight context_proj_, markov_w1_, markov_w2_;
    std::vector<float> context_norm_, final_norm_, confidence_w_, confidence_b_;
    std::vector<Layer> layers_;
    Rope rope_;
    ExecContext ctx_;  // what its passes run in: its threads, the scratch of its larger pass, the default backend
};

}  // namespace sluice
