// What one sequence holds for one layer: the per-token caches of attention layers (MLA latents, GQA keys and values)
// and the fixed recurrent state of KDA layers, with what KDA needs to roll back (a snapshot and a journal of the rows
// since). The blocks in models/blocks read and write these; state/sequence_state.h owns them.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ops/ops.h"
#include "state/page_pool.h"

namespace sluice {

// A per-token cache of one layer: rows of `width` floats in pages of k_page_rows rows, taken from a PagePool
// (state/page_pool.h). Copies share pages (reference-counted in the pool); a write into a shared page copies that page
// first (copy-on-write), so fork() and the prefix cache cost no copies of the rows they have in common, and memory
// grows a page at a time (no vector doubling past the plan).
class PagedRows {
public:
    static constexpr int64_t k_page_shift = 6;
    static constexpr int64_t k_page_rows = int64_t(1) << k_page_shift;
    PagedRows() = default;
    PagedRows(const PagedRows& o);
    PagedRows(PagedRows&& o) noexcept;
    PagedRows& operator=(const PagedRows& o);
    PagedRows& operator=(PagedRows&& o) noexcept;
    ~PagedRows() { truncate(0); }
    // Empty, with rows of `width` floats from `pool` (pages of k_page_rows * width floats); without a pool, from a
    // pool of its own that grows as needed (caches outside a model's plan: a drafter's, tests').
    void init(int64_t width, std::shared_ptr<PagePool> pool = nullptr);
    int64_t width() const { return width_; }
    int64_t rows() const { return rows_; }
    // Row t (t <= rows()) to write; rows() becomes at least t + 1.
    float* write_row(int64_t t);
    // Rows [t, t + count) to write, contiguous: all in t's page (t <= rows()); rows() becomes at least t + count.
    float* write_rows(int64_t t, int64_t count);
    const float* row(int64_t t) const { return ptrs_[size_t(t / k_page_rows)] + (t % k_page_rows) * width_; }
    void truncate(int64_t n);  // keeps rows < n
    ops::RowView view() const { return {ptrs_.data(), nullptr, k_page_shift, width_}; }
    uint64_t page_bytes() const { return uint64_t(k_page_rows * width_) * sizeof(float); }
    uint64_t size_bytes() const { return pages_.size() * page_bytes(); }
    // Calls f(page, page_bytes()) for each page (the prefix cache counts a page its entries share once).
    template <class F>
    void each_page(F&& f) const {
        for (const float* p : ptrs_) f(static_cast<const void*>(p), page_bytes());
    }

private:
    int64_t width_ = 0, rows_ = 0;
    std::shared_ptr<PagePool> pool_;
    std::vector<PagePool::Page> pages_;
    std::vector<const float*> ptrs_;  // pages_[i].data, for views
};

// MLA: per token the normalised latent c_kv followed by the rope key: [n_tokens, cache_width] f32.
struct MlaCache {
    PagedRows data;
};

// GQA: k and v as [n_tokens, n_kv_heads, head_dim] f32 (k after norm and RoPE).
struct KvCache {
    PagedRows k, v;
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
