// Pieces every architecture's forward pass shares: validating a batch and grouping its rows by sequence, and the
// final norm + LM head over the rows that want logits.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/error.h"
#include "core/scratch_arena.h"
#include "models/model.h"
#include "ops/exec_context.h"
#include "ops/weight.h"

namespace sluice {

// A pass's rows grouped by sequence: for each sequence of the batch, in ascending index, its batch rows in batch
// order. A model keeps one and refills it every pass (group_rows): its lists keep their capacity, so grouping
// allocates nothing once they have grown to the largest pass.
class RowGroups {
public:
    struct Group {
        int32_t seq;
        std::span<const int64_t> rows;
    };
    const Group* begin() const { return groups_.data(); }
    const Group* end() const { return groups_.data() + groups_.size(); }
    size_t size() const { return groups_.size(); }

private:
    friend const RowGroups& group_rows(RowGroups&, const Batch&, std::span<SequenceState* const>, int64_t,
                                       const StateLayout*);
    std::vector<std::vector<int64_t>> rows_;  // [sequence index]
    std::vector<Group> groups_;
};

// Checks token ids, sequence indices, that each sequence was made by this model (from `layout`) and that its rows
// continue its state in order; fills `into` with sequence index -> its batch rows (in batch order) and returns it.
inline const RowGroups& group_rows(RowGroups& into, const Batch& batch, std::span<SequenceState* const> seqs,
                                   int64_t vocab_size, const StateLayout* layout) {
    const int64_t n = batch.size();
    SLUICE_CHECK(n > 0, "forward: empty batch");
    if (into.rows_.size() < seqs.size()) into.rows_.resize(seqs.size());
    for (auto& r : into.rows_) r.clear();
    for (int64_t i = 0; i < n; ++i) {
        const int32_t t = batch.tokens[size_t(i)];
        SLUICE_CHECK(t >= 0 && t < vocab_size, "token id ", t, " at batch row ", i, " is outside the vocabulary [0, ",
                     vocab_size, ")");
        const int32_t s = batch.seq[size_t(i)];
        SLUICE_CHECK(s >= 0 && size_t(s) < seqs.size(), "batch row ", i, ": sequence index ", s, " out of range");
        into.rows_[size_t(s)].push_back(i);
    }
    into.groups_.clear();
    for (size_t s = 0; s < seqs.size(); ++s)
        if (!into.rows_[s].empty()) into.groups_.push_back({int32_t(s), into.rows_[s]});
    for (const auto& [s, rows] : into) {
        SLUICE_CHECK(seqs[size_t(s)]->made_from(layout), "sequence ", s, " was not created by this model");
        const int64_t past = seqs[size_t(s)]->n_past();
        for (size_t j = 0; j < rows.size(); ++j)
            SLUICE_CHECK(batch.positions[size_t(rows[j])] == past + int64_t(j), "sequence ", s,
                         ": batch rows must continue the cache in order (expected position ", past + int64_t(j),
                         ", got ", batch.positions[size_t(rows[j])], ")");
    }
    return into;
}

// After a forward pass: each sequence's rows are in its caches; record their tokens (a sequence's at once, so its
// token list grows as one insert of them grows it; the ids through the calling thread's buffer, grown once).
inline void append_rows(const Batch& batch, std::span<SequenceState* const> seqs, const RowGroups& rows_of) {
    thread_local std::vector<int32_t> ids;
    for (const auto& [s, rows] : rows_of) {
        ids.clear();
        for (int64_t r : rows) ids.push_back(batch.tokens[size_t(r)]);
        seqs[size_t(s)]->append(ids);
    }
}

// x[i, :d] = row batch.tokens[i] of the embedding matrix, for every row of the batch.
void embed_rows(const Weight& embed, const Batch& batch, int64_t d, float* x);

// A pass's scratch (released with it) and its three [n, d] buffers: the residual stream x, holding the embedded
// batch, a block's normed input h and a block's output y.
struct EmbeddedPass {
    EmbeddedPass(ExecContext& ctx, const Weight& embed, const Batch& batch, int64_t d)
        : scope(ctx.begin_pass(batch.size())), x(ctx.arena().f32(batch.size() * d)),
          h(ctx.arena().f32(batch.size() * d)), y(ctx.arena().f32(batch.size() * d)) {
        embed_rows(embed, batch, d, x);
    }
    ScratchArena::Scope scope;
    float* x;
    float* h;
    float* y;
};

// logits[batch.n_logits(), vocab] = lm_head(rms_norm(x row)) for the rows that want logits; x is [n, d]. Runs in
// ctx; the normed rows come from its arena (carved for all n rows: head_scratch_bytes).
void head_logits(const float* x, const Batch& batch, int64_t d, const std::vector<float>& norm, float eps,
                 const Weight& lm_head, ExecContext& ctx, std::vector<float>& logits);
inline uint64_t head_scratch_bytes(int64_t n, int64_t d) { return ScratchArena::f32_bytes(n * d); }

}  // namespace sluice
