// The pages the per-token caches (state/caches.h: PagedRows) live in: fixed-size pages carved from a few large slabs,
// handed out through a free list, each with a reference count so forks and prefix-cache entries share a page until
// one of them writes into it (copy-on-write). One pool per page size; a model's StatePages holds one pool per cache
// width of its StateLayout, sized from the memory plan's reservation for sequence state.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace sluice {

struct StateLayout;

class PagePool {
public:
    struct Page {
        float* data = nullptr;
        std::atomic<uint32_t>* refs = nullptr;  // holders of the page (PagedRows)
    };
    // Pages of page_floats floats, slabs of slab_pages pages allocated as needed. max_pages > 0: the pool never holds
    // more (the plan's reservation); acquire() beyond it throws Error naming `what`. max_pages == 0: no bound (no
    // plan to keep to), slabs are added as pages are needed.
    PagePool(int64_t page_floats, int64_t slab_pages, int64_t max_pages, std::string what);
    PagePool(const PagePool&) = delete;
    PagePool& operator=(const PagePool&) = delete;

    // A page with one holder; its contents are whatever its last holder left (writers fill rows before reading).
    Page acquire();
    static void retain(Page p) { p.refs->fetch_add(1, std::memory_order_relaxed); }
    // One holder fewer; the last one returns the page to the free list.
    void release(Page p);
    static uint32_t holders(Page p) { return p.refs->load(std::memory_order_acquire); }

    int64_t page_floats() const { return page_floats_; }
    uint64_t page_bytes() const { return uint64_t(page_floats_) * sizeof(float); }
    int64_t max_pages() const { return max_pages_; }
    int64_t pages_allocated() const;  // in the slabs so far
    int64_t pages_in_use() const;
    uint64_t slab_bytes_total() const { return uint64_t(pages_allocated()) * page_bytes(); }

private:
    struct Slab {
        std::unique_ptr<float[]> data;
        std::unique_ptr<std::atomic<uint32_t>[]> refs;
    };
    void add_slab();  // under mu_

    const int64_t page_floats_, slab_pages_, max_pages_;
    const std::string what_;
    mutable std::mutex mu_;
    std::vector<Slab> slabs_;
    std::vector<Page> free_;  // capacity: every page of the slabs, so release() never allocates
    int64_t allocated_ = 0;
};

// What the memory plan reserves sequence state for (LoadOptions): the per-token caches of max_context_tokens tokens in
// all over max_sequences sequences (each with a partly empty last page) and prefix_cache_bytes of cached states.
// bounded: the plan is binding (a memory budget was given), so a pool never holds more than its share.
struct StatePagePlan {
    int64_t max_context_tokens = 4096;
    int64_t max_sequences = 1;
    uint64_t prefix_cache_bytes = 0;
    bool bounded = false;
};

// The page pools of one model's sequence states: one per cache width of its layout (MLA latents; GQA keys and values
// share one), each sized from the plan, and unplanned ones made on request for other widths (DSpark's hidden-state
// taps, which the plan does not carry). Thread-safe.
class StatePages {
public:
    // Without a plan (states made by hand, tests): unbounded pools with small slabs.
    explicit StatePages(const StateLayout& layout);
    StatePages(const StateLayout& layout, const StatePagePlan& plan);
    std::shared_ptr<PagePool> pool(int64_t width);  // pages of k_page_rows rows of `width` floats
    // Pages the plan gives a cache width (0 when the layout has no cache of that width).
    static int64_t planned_pages(const StateLayout& layout, const StatePagePlan& plan, int64_t width);

private:
    std::mutex mu_;
    std::vector<std::pair<int64_t, std::shared_ptr<PagePool>>> pools_;  // by width
    int64_t unplanned_slab_pages_ = 16;
};

}  // namespace sluice
