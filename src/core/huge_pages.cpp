#include "core/huge_pages.h"

#include <sys/mman.h>

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

}  // namespace sluice
