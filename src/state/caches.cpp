#include "state/caches.h"

#include <algorithm>

#include "core/error.h"
#include "ops/kda.h"
#include "ops/ops.h"

namespace sluice {

PagedRows::PagedRows(const PagedRows& o)
    : width_(o.width_), rows_(o.rows_), pool_(o.pool_), pages_(o.pages_), ptrs_(o.ptrs_) {
    for (const auto& p : pages_) PagePool::retain(p);
}

PagedRows::PagedRows(PagedRows&& o) noexcept
    : width_(o.width_), rows_(o.rows_), pool_(std::move(o.pool_)), pages_(std::move(o.pages_)),
      ptrs_(std::move(o.ptrs_)) {
    o.rows_ = 0;
    o.pages_.clear();
    o.ptrs_.clear();
}

PagedRows& PagedRows::operator=(const PagedRows& o) {
    if (this != &o) *this = PagedRows(o);
    return *this;
}

PagedRows& PagedRows::operator=(PagedRows&& o) noexcept {
    if (this == &o) return *this;
    truncate(0);
    width_ = o.width_;
    rows_ = o.rows_;
    pool_ = std::move(o.pool_);
    pages_ = std::move(o.pages_);
    ptrs_ = std::move(o.ptrs_);
    o.rows_ = 0;
    o.pages_.clear();
    o.ptrs_.clear();
    return *this;
}

void PagedRows::init(int64_t width, std::shared_ptr<PagePool> pool) {
    SLUICE_ASSERT(rows_ == 0 && width > 0, "PagedRows::init(", width, ") of a cache holding ", rows_, " rows");
    SLUICE_ASSERT(!pool || pool->page_floats() == k_page_rows * width, "PagedRows::init(", width,
                  ") with a pool of pages of ", pool ? pool->page_floats() : 0, " floats");
    width_ = width;
    pool_ = pool ? std::move(pool) : std::make_shared<PagePool>(k_page_rows * width, 16, 0, "a cache of its own");
}

float* PagedRows::write_row(int64_t t) {
    SLUICE_ASSERT(t >= 0 && t <= rows_ && width_ > 0, "PagedRows: write of row ", t, " with ", rows_, " rows");
    const size_t p = size_t(t / k_page_rows);
    if (p == pages_.size()) {
        pages_.push_back(pool_->acquire());
        ptrs_.push_back(pages_.back().data);
    } else if (PagePool::holders(pages_[p]) > 1) {
        // shared with a fork or a cached prefix: this sequence gets its own copy before it writes
        const PagePool::Page own = pool_->acquire();
        std::copy_n(pages_[p].data, size_t(k_page_rows * width_), own.data);
        pool_->release(pages_[p]);
        pages_[p] = own;
        ptrs_[p] = own.data;
    }
    rows_ = std::max(rows_, t + 1);
    return pages_[p].data + (t % k_page_rows) * width_;
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
    for (size_t i = keep; i < pages_.size(); ++i) pool_->release(pages_[i]);
    if (keep < pages_.size()) {
        pages_.resize(keep);
        ptrs_.resize(keep);
    }
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
