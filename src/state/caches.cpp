#include "state/caches.h"

#include <algorithm>

#include "core/error.h"
#include "ops/kda.h"
#include "ops/ops.h"

namespace sluice {

float* PagedRows::write_row(int64_t t) {
    SLUICE_ASSERT(t >= 0 && t <= rows_ && width_ > 0, "PagedRows: write of row ", t, " with ", rows_, " rows");
    const size_t p = size_t(t / k_page_rows);
    const size_t page_floats = size_t(k_page_rows * width_);
    if (p == pages_.size()) {
        pages_.emplace_back(new float[page_floats]);
        ptrs_.push_back(pages_.back().get());
    } else if (pages_[p].use_count() > 1) {
        // shared with a fork or a cached prefix: this sequence gets its own copy before it writes
        std::shared_ptr<float[]> own(new float[page_floats]);
        std::copy_n(pages_[p].get(), page_floats, own.get());
        pages_[p] = std::move(own);
        ptrs_[p] = pages_[p].get();
    }
    rows_ = std::max(rows_, t + 1);
    return pages_[p].get() + (t % k_page_rows) * width_;
}

float* PagedRows::write_rows(int64_t t, int64_t count) {
    SLUICE_ASSERT(count >= 1 && t % k_page_rows + count <= k_page_rows, "PagedRows: write of rows ", t, "..",
                  t + count, " across a page");
    float* p = write_row(t);
    rows_ = std::max(rows_, t + count);
    return p;
}

void PagedRows::truncate(int64_t n) {
    rows_ = std::min(rows_, std::max<int64_t>(n, 0));
    const size_t keep = size_t((rows_ + k_page_rows - 1) / k_page_rows);
    pages_.resize(keep);
    ptrs_.resize(keep);
}

void KdaState::reset(int64_t heads, int64_t dim, int64_t kernel) {
    n_heads = heads;
    head_dim = dim;
    conv_kernel = kernel;
    conv.assign(size_t(3 * proj_dim() * (kernel - 1)), 0.0f);
    state.assign(size_t(heads * dim * dim), 0.0f);
    journaling = false;
    snap_conv.clear();
    snap_state.clear();
    journal.clear();
}

void KdaState::snapshot() {
    snap_conv = conv;
    snap_state = state;
    journal.clear();
    journaling = true;
}

void KdaState::replay(int64_t rows) {
    SLUICE_ASSERT(journaling && rows >= 0 && rows <= journal_rows(), "KDA replay of ", rows, " rows with ",
                  journal_rows(), " journaled");
    const int64_t P = proj_dim(), H = n_heads, D = head_dim, K = conv_kernel, W = journal_width();
    conv = snap_conv;
    state = snap_state;
    // the convolutions' taps: each row shifts its raw input in, as the forward pass's short convolution does
    if (K > 1)
        for (int64_t j = 0; j < rows; ++j) {
            const float* raw = journal.data() + j * W;
            for (int64_t ch = 0; ch < 3 * P; ++ch) {
                float* tp = conv.data() + ch * (K - 1);
                std::copy(tp + 1, tp + K - 1, tp);
                tp[K - 2] = raw[ch];
            }
        }
    // the delta rule, row by row as the forward pass ran it (its output is not needed: o goes to scratch). A replay
    // runs outside any pass (SequenceState::truncate, from the engine, the prefix cache, drafters), so no context is
    // at hand: it takes the process default backend, on the calling thread. Either side gives the same bits
    // (ops/kda.h), so which one the pass ran on does not matter to the state, only to the time.
    if (rows > 0) {
        const float* base = journal.data();
        const KdaHeadIo io{base + 3 * P, base + 3 * P, base + 4 * P, base + 5 * P, base + 6 * P, nullptr, W, W};
        ops::kda_recurrent_heads(io, H, rows, D, state.data(), ops::backend(), nullptr);
    }
    journal.resize(size_t(rows * W));
}

void KdaState::advance_snapshot(int64_t rows) {
    if (rows == 0) return;
    const size_t W = size_t(journal_width());
    std::vector<float> rest(journal.begin() + std::ptrdiff_t(size_t(rows) * W), journal.end());
    std::vector<float> cur_conv = std::move(conv), cur_state = std::move(state);
    replay(rows);
    snap_conv = std::move(conv);
    snap_state = std::move(state);
    conv = std::move(cur_conv);
    state = std::move(cur_state);
    journal = std::move(rest);
}

void KdaState::drop_snapshot() {
    journaling = false;
    snap_conv = {};
    snap_state = {};
    journal = {};
}

}  // namespace sluice
