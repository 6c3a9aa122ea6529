#include "core/huge_pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <thread>

namespace sluice {

uint8_t* alloc_huge_advised(size_t bytes) {
    const size_t rounded = (bytes + k_huge_page_bytes - 1) / k_huge_page_bytes * k_huge_page_bytes;
    if (rounded == 0) return nullptr;
    auto* p = static_cast<uint8_t*>(std::aligned_alloc(k_huge_page_bytes, rounded));
#ifdef MADV_HUGEPAGE
    if (p) madvise(p, rounded, MADV_HUGEPAGE);  // advice only: ignored where THP is off
#endif
    return p;
}

struct BackgroundPopulate::State {
    uint8_t* p;
    size_t bytes;
    std::atomic<bool> stop{false};
    std::atomic<size_t> done{0};
    std::thread thread;
};

BackgroundPopulate::BackgroundPopulate(uint8_t* p, size_t bytes) : s_(std::make_unique<State>()) {
    s_->p = p;
    s_->bytes = p ? bytes : 0;
    State* s = s_.get();
    s->thread = std::thread([s] {
#if defined(__linux__)
        constexpr int kPopulateWrite = 23;  // MADV_POPULATE_WRITE (Linux 5.14), spelled out for older headers
        for (size_t at = 0; at < s->bytes && !s->stop.load(std::memory_order_relaxed);) {
            const size_t n = std::min(k_huge_page_bytes, s->bytes - at);
            if (madvise(s->p + at, n, kPopulateWrite) != 0) return;  // not supported (or no memory): the reads fault
            at += n;
            s->done.store(at, std::memory_order_relaxed);
        }
#endif
    });
}

BackgroundPopulate::~BackgroundPopulate() {
    s_->stop.store(true);
    if (s_->thread.joinable()) s_->thread.join();
}

void BackgroundPopulate::wait() {
    if (s_->thread.joinable()) s_->thread.join();
}

size_t BackgroundPopulate::populated_bytes() const { return s_->done.load(); }

}  // namespace sluice
