#include "state/page_pool.h"

#include <algorithm>

#include "core/error.h"
#include "state/sequence_state.h"

namespace sluice {

PagePool::PagePool(int64_t page_floats, int64_t slab_pages, int64_t max_pages, std::string what)
    : page_floats_(page_floats),
      slab_pages_(std::max<int64_t>(slab_pages, 1)),
      max_pages_(max_pages),
      what_(std::move(what)) {
    SLUICE_ASSERT(page_floats > 0 && max_pages >= 0, "PagePool of ", page_floats, " floats a page, ", max_pages,
                  " pages at most");
}

void PagePool::add_slab() {
    int64_t n = slab_pages_;
    if (max_pages_ > 0) n = std::min(n, max_pages_ - allocated_);
    // uninitialised: a slab's pages are touched (and so made resident) only as they are first written
    Slab s{std::unique_ptr<float[]>(new float[size_t(n * page_floats_)]),
           std::unique_ptr<std::atomic<uint32_t>[]>(new std::atomic<uint32_t>[size_t(n)])};
    free_.reserve(size_t(allocated_ + n));
    for (int64_t i = n - 1; i >= 0; --i) free_.push_back({s.data.get() + i * page_floats_, &s.refs[size_t(i)]});
    slabs_.push_back(std::move(s));
    allocated_ += n;
}

PagePool::Page PagePool::acquire() {
    std::lock_guard lock(mu_);
    if (free_.empty()) {
        SLUICE_CHECK(max_pages_ == 0 || allocated_ < max_pages_, "sequence state: all ", max_pages_, " pages of ",
                     page_bytes(), " bytes for ", what_, " (", (uint64_t(max_pages_) * page_bytes()) >> 20,
                     " MiB, the memory plan's reservation for --ctx tokens, --parallel sequences and the prefix "
                     "cache) are in use; load the model with a larger context reservation");
        add_slab();
    }
    Page p = free_.back();
    free_.pop_back();
    p.refs->store(1, std::memory_order_relaxed);
    return p;
}

void PagePool::release(Page p) {
    if (p.refs->fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    std::lock_guard lock(mu_);
    free_.push_back(p);  // within the capacity reserved for every page
}

int64_t PagePool::pages_allocated() const {
    std::lock_guard lock(mu_);
    return allocated_;
}

int64_t PagePool::pages_in_use() const {
    std::lock_guard lock(mu_);
    return allocated_ - int64_t(free_.size());
}

namespace {

// Per-token caches of the layout with `width` floats a row (a GQA layer has two: k and v).
int64_t caches_of_width(const StateLayout& layout, int64_t width) {
    int64_t n = 0;
    for (const auto& l : layout.layers)
        if (l.width == width) n += l.kind == StateLayout::Kind::kv ? 2 : l.kind == StateLayout::Kind::latent ? 1 : 0;
    return n;
}

constexpr int64_t k_max_pages = int64_t(1) << 40;  // saturation: "more than any machine holds"

int64_t ceil_div_sat(uint64_t a, uint64_t b) { return int64_t(std::min<uint64_t>((a + b - 1) / b, k_max_pages)); }

}  // namespace

int64_t StatePages::planned_pages(const StateLayout& layout, const StatePagePlan& plan, int64_t width) {
    const int64_t caches = caches_of_width(layout, width);
    if (caches == 0) return 0;
    // StateLayout::reserve_bytes' per-token part (each sequence's last page partly empty) and the prefix cache's
    // bytes as pages of every cache (its entries also hold unpaged state, so this is an upper bound)
    const uint64_t group_bytes = uint64_t(PagedRows::k_page_rows) * layout.bytes_per_token();  // a page of each cache
    const int64_t per_cache = ceil_div_sat(uint64_t(plan.max_context_tokens), uint64_t(PagedRows::k_page_rows)) +
                              plan.max_sequences + ceil_div_sat(plan.prefix_cache_bytes, group_bytes);
    return std::min(per_cache, k_max_pages / caches) * caches;
}

StatePages::StatePages(const StateLayout& layout) {
    for (const auto& l : layout.layers)
        if (l.width > 0) (void)pool(l.width);
}

StatePages::StatePages(const StateLayout& layout, const StatePagePlan& plan) {
    for (const auto& l : layout.layers) {
        if (l.width <= 0 ||
            std::any_of(pools_.begin(), pools_.end(), [&](const auto& p) { return p.first == l.width; }))
            continue;
        const int64_t page_floats = PagedRows::k_page_rows * l.width;
        const int64_t planned = planned_pages(layout, plan, l.width);
        // a few large slabs, each allocated when its first page is needed: a quarter of the running sequences' pages
        // (not the prefix cache's, which may be "unlimited" without a budget), at most 1 GiB
        const int64_t slab_cap = std::max<int64_t>(1, int64_t((uint64_t(1) << 30) / (uint64_t(page_floats) * 4)));
        const StatePagePlan running{plan.max_context_tokens, plan.max_sequences, 0, plan.bounded};
        const int64_t slab = std::clamp<int64_t>((planned_pages(layout, running, l.width) + 3) / 4, 1, slab_cap);
        pools_.emplace_back(l.width,
                            std::make_shared<PagePool>(page_floats, slab, plan.bounded ? planned : 0,
                                                       "caches of " + std::to_string(l.width) + " floats a row"));
        unplanned_slab_pages_ =
            std::max(unplanned_slab_pages_, slab / std::max<int64_t>(1, caches_of_width(layout, l.width)));
    }
}

std::shared_ptr<PagePool> StatePages::pool(int64_t width) {
    std::lock_guard lock(mu_);
    for (const auto& [w, p] : pools_)
        if (w == width) return p;
    // not in the plan (the hidden-state taps): grows as needed
    pools_.emplace_back(width, std::make_shared<PagePool>(PagedRows::k_page_rows * width, unplanned_slab_pages_, 0,
                                                          "rows of " + std::to_string(width) + " floats"));
    return pools_.back().second;
}

}  // namespace sluice
