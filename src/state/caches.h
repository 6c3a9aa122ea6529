// What one sequence holds for one layer: the per-token caches of attention layers (MLA latents, GQA keys and values)
// and the fixed recurrent state of KDA layers, with what KDA needs to roll back (a snapshot and a journal of the rows
// since). The blocks in models/blocks read and write these; state/sequence_state.h owns them.
#pragma once

#include <cstdint>
#include <vector>

namespace sluice {

// MLA: per token the normalised latent c_kv followed by the rope key: [n_tokens, cache_width] f32.
struct MlaCache {
    std::vector<float> data;
};

// GQA: k and v as [n_tokens, n_kv_heads, head_dim] f32 (k after norm and RoPE).
struct KvCache {
    std::vector<float> k, v;
};

// KDA: the last conv_kernel-1 raw inputs of the q, k and v convolutions and the delta-rule state of every head.
// Rollback: snapshot() copies both; from then on every row appends its delta-rule inputs to the journal (the raw
// conv inputs, the normalised k, the convolved v, the log-decay g and beta), so the state at any later position is
// the snapshot plus a replay of the journal's first rows through the same recurrent arithmetic: bit-identical to
// having run only those rows.
struct KdaState {
    int64_t n_heads = 0, head_dim = 0, conv_kernel = 0;
    std::vector<float> conv;   // [3, P, conv_kernel-1], oldest first; P = n_heads * head_dim
    std::vector<float> state;  // [H, D_k, D_v]
    bool journaling = false;   // a snapshot is held and rows are journaled
    std::vector<float> snap_conv, snap_state;
    std::vector<float> journal;  // [rows, journal_width()]

    void reset(int64_t heads, int64_t dim, int64_t kernel);  // zero state, no snapshot
    int64_t proj_dim() const { return n_heads * head_dim; }
    // Journal row: raw q|k|v [3P], k [P], v [P], g [P], beta [H].
    int64_t journal_width() const { return 6 * proj_dim() + n_heads; }
    int64_t journal_rows() const { return journaling ? int64_t(journal.size()) / journal_width() : 0; }
    void snapshot();               // the current state becomes the restore point; the journal starts empty
    void replay(int64_t rows);     // state := snapshot + the journal's first `rows` rows; later rows are dropped
    void advance_snapshot(int64_t rows);  // snapshot := snapshot + the journal's first `rows` rows, which it drops
    void drop_snapshot();          // no snapshot, no journal
    uint64_t size_bytes() const {
        return (conv.capacity() + state.capacity() + snap_conv.capacity() + snap_state.capacity() +
                journal.capacity()) * sizeof(float);
    }
};

}  // namespace sluice
