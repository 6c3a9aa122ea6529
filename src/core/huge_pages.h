// Memory that weights stream through: 2 MiB-aligned and advised as transparent huge pages. The expert cache holds
// streamed experts in it, and the kernel benchmark holds its weights in it, so both see the same TLB behaviour.
// The advice is only advice: where THP is off (or "never") the memory is ordinary 4 KiB pages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace sluice {

inline constexpr size_t k_huge_page_bytes = size_t(2) << 20;

// Returns memory for `bytes` (rounded up to whole huge pages), 2 MiB-aligned, advised MADV_HUGEPAGE; nullptr if
// the allocation fails. Free it with std::free.
uint8_t* alloc_huge_advised(size_t bytes);

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
