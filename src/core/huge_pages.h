// Memory that weights stream through: 2 MiB-aligned and advised as transparent huge pages. The expert cache holds
// streamed experts in it, and the kernel benchmark holds its weights in it, so both see the same TLB behaviour.
// The advice is only advice: where THP is off (or "never") the memory is ordinary 4 KiB pages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

namespace sluice {

inline constexpr size_t k_huge_page_bytes = size_t(2) << 20;

// Returns memory for `bytes` (rounded up to whole huge pages), 2 MiB-aligned, advised MADV_HUGEPAGE; nullptr if
// the allocation fails. Free it with std::free.
uint8_t* alloc_huge_advised(size_t bytes);

// Faults in [p, p + bytes) on a thread of its own, a huge page at a time and in address order, with
// madvise(MADV_POPULATE_WRITE): the kernel maps (and zeroes) each page as a write would, without writing, so a page
// already in use keeps its bytes and the thread never races the memory's users. The expert cache's slots are
// otherwise faulted in by the first read into each, inside io_uring's submission on the thread that asked (a cold
// K3-slice prefill spent 23% of both cores' samples in the kernel zeroing them, and its first MoE layer's reads ran
// at a tenth of the drive's rate behind that: docs/cpu.md). Where the kernel lacks MADV_POPULATE_WRITE (before
// Linux 5.14) the thread stops at once and the reads fault the pages in as before. The destructor stops and joins.
class BackgroundPopulate {
public:
    BackgroundPopulate(uint8_t* p, size_t bytes);
    ~BackgroundPopulate();
    BackgroundPopulate(const BackgroundPopulate&) = delete;
    BackgroundPopulate& operator=(const BackgroundPopulate&) = delete;
    void wait();  // until every page is populated (or populating stopped): tests
    size_t populated_bytes() const;

private:
    struct State;
    std::unique_ptr<State> s_;
};

// A std::vector allocator over alloc_huge_advised (benchmarks and tests). Throws std::bad_alloc on failure.
template <class T>
struct HugePageAllocator {
    using value_type = T;
    HugePageAllocator() = default;
    template <class U>
    HugePageAllocator(const HugePageAllocator<U>&) {}
    T* allocate(size_t n) {
        uint8_t* p = alloc_huge_advised(n * sizeof(T));
        if (!p) throw std::bad_alloc();
        return reinterpret_cast<T*>(p);
    }
    void deallocate(T* p, size_t) { std::free(p); }
    template <class U>
    bool operator==(const HugePageAllocator<U>&) const {
        return true;
    }
};

}  // namespace sluice
