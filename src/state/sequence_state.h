// One sequence's state: the token ids it has seen, and per layer its per-token cache (MLA latents, GQA k/v) or its
// fixed recurrent state (KDA). A model describes what each layer holds once (StateLayout) and creates states from
// it; forward() writes each row's cache entries and then append()s the rows' tokens.
//
// Rollback and branching, for every architecture:
// - truncate(n) forgets positions >= n. Per-token caches simply shrink. Recurrent (KDA) state goes back to the last
//   snapshot() and replays the journaled rows up to n (state/caches.h), so with a snapshot at s any n in [s, n_past]
//   is reachable, bit for bit; truncate(0) always resets.
// - snapshot() makes the current position the restore point (a copy of every KDA state; free for caches).
// - fork() is an independent copy at the same position (prefix reuse, branches).
// - save/load (state/state_file.h) write and read it, tied to the model's fingerprint.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "state/caches.h"

namespace sluice {

struct StateFileModel;

struct StateLayout {
    enum class Kind : uint8_t { none = 0, latent = 1, kv = 2, kda = 3 };
    struct Layer {
        Kind kind = Kind::none;
        int64_t width = 0;  // latent: floats per token; kv: floats per token of k (and of v)
        int64_t kda_heads = 0, kda_head_dim = 0, conv_kernel = 0;  // kda
    };
    std::vector<Layer> layers;

    void add_latent(int64_t width) { layers.push_back({Kind::latent, width}); }
    void add_kv(int64_t kv_width) { layers.push_back({Kind::kv, kv_width}); }
    void add_kda(int64_t heads, int64_t head_dim, int64_t conv_kernel) {
        layers.push_back({Kind::kda, 0, heads, head_dim, conv_kernel});
    }
    bool has_recurrent() const;
    uint64_t bytes_per_token() const;   // per-token caches of all layers
    uint64_t recurrent_bytes() const;   // fixed state of all layers, without a snapshot
    uint64_t journal_bytes_per_row() const;  // what a snapshot journals per row (KDA layers' delta-rule inputs)
    // What the memory plan reserves for max_sequences sequences holding max_context_tokens tokens in all: the
    // per-token caches (each sequence's last page partly empty) and each sequence's fixed state. With
    // snapshot_rows > 0 (sequences snapshot their recurrent state within a pass: the prefix cache at a prompt's
    // last chunk, speculation before its drafts), also a snapshot copy per sequence and the journal of that many
    // rows (one pass's rows: snapshots never outlive their pass).
    uint64_t reserve_bytes(int64_t max_context_tokens, int64_t max_sequences, int64_t snapshot_rows = 0) const;
    bool operator==(const StateLayout&) const = default;
};
bool operator==(const StateLayout::Layer& a, const StateLayout::Layer& b);

class SequenceState {
public:
    // Caches' pages from `pages` (the model's, sized from its memory plan); without, from pools of the state's own.
    explicit SequenceState(std::shared_ptr<const StateLayout> layout, std::shared_ptr<StatePages> pages = nullptr);

    const StateLayout& layout() const { return *layout_; }
    // Whether this state was made from `layout` (the model that made it).
    bool made_from(const StateLayout* layout) const { return layout_.get() == layout; }

    int64_t n_past() const { return int64_t(tokens_.size()); }  // tokens in the state
    std::span<const int32_t> tokens() const { return tokens_; }
    MlaCache& latent(int64_t layer);
    KvCache& kv(int64_t layer);
    KdaState& kda(int64_t layer);
    const MlaCache& latent(int64_t layer) const { return const_cast<SequenceState*>(this)->latent(layer); }
    const KvCache& kv(int64_t layer) const { return const_cast<SequenceState*>(this)->kv(layer); }
    const KdaState& kda(int64_t layer) const { return const_cast<SequenceState*>(this)->kda(layer); }
    // Hidden-state taps (Model::set_hidden_taps): row t holds the residual stream after each tapped layer at
    // position t, side by side. Empty (width 0) unless the model taps; truncate() and fork() keep it in step with the
    // caches. Not part of the layout: state files and the memory plan do not carry it, so a restored state has
    // fewer tap rows than positions (a drafter that needs them drafts nothing until they are there again).
    PagedRows& taps() { return taps_; }
    void init_taps(int64_t width) { taps_.init(width, pages_->pool(width)); }  // empty, rows of `width` floats
    const PagedRows& taps() const { return taps_; }
    // The model has written these rows (positions n_past.. in order) into every layer.
    void append(std::span<const int32_t> tokens) { tokens_.insert(tokens_.end(), tokens.begin(), tokens.end()); }

    void snapshot();
    int64_t snapshot_position() const { return snap_pos_; }  // -1: none
    // Moves the snapshot forward to `position` (snapshot_position() <= position <= n_past()), so the journal (and
    // its memory) keeps only the rows after it.
    void advance_snapshot(int64_t position);
    // Forgets the snapshot and stops journaling (rollback below n_past is then impossible for recurrent state).
    void drop_snapshot();
    // The smallest n > 0 that truncate(n) accepts: 0 without recurrent layers, else the snapshot's position
    // (n_past when there is none).
    int64_t rollback_floor() const;
    // Forgets positions >= n (n >= n_past: nothing). Throws Error when 0 < n < rollback_floor().
    void truncate(int64_t n);
    std::unique_ptr<SequenceState> fork() const;
    uint64_t size_bytes() const;
    // size_bytes() = unpaged_bytes() + the bytes of the pages each_page() visits: the pages of the per-token caches
    // (shared with forks until written) and the rest (token ids, recurrent state, snapshot, journal), its own.
    uint64_t unpaged_bytes() const;
    void each_page(const std::function<void(const void* page, uint64_t bytes)>& f) const;

private:
    friend void load_state(const std::string& path, const StateFileModel& model, SequenceState& into);
    SequenceState(const SequenceState&) = default;
    SequenceState& operator=(SequenceState&&) = default;
    std::shared_ptr<const StateLayout> layout_;
    std::shared_ptr<StatePages> pages_;  // where the caches' pages come from (declared first: destroyed last)
    std::vector<int32_t> tokens_;
    std::vector<MlaCache> latent_;  // [layers]: used by latent layers
    std::vector<KvCache> kv_;       // [layers]: used by kv layers
    std::vector<KdaState> kda_;     // [layers]: used by kda layers
    PagedRows taps_;                // hidden-state taps, [positions, n_taps * hidden] (empty unless the model taps)
    int64_t snap_pos_ = -1;
};

}  // namespace sluice
