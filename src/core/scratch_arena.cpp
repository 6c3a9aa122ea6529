#include "core/scratch_arena.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/error.h"
#include "core/host_pinning.h"

namespace sluice {

namespace {
// Aligned storage without value-initialisation: new T[n] of a trivial type leaves its bytes as they are, so the
// pages are touched (and zeroed by the kernel) once, when first written, not on every pass.
std::unique_ptr<std::byte[]> allocate(uint64_t bytes) {
    return std::unique_ptr<std::byte[]>(new std::byte[bytes + ScratchArena::kAlignBytes]);
}
std::byte* align_up(std::byte* p) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    return p + (ScratchArena::aligned(a) - a);
}
}  // namespace

ScratchArena::~ScratchArena() {
    if (pinned_) host_pinning::unpin(align_up(base_.get()));
}

ScratchArena::ScratchArena() {
    const char* p = std::getenv("SLUICE_SCRATCH_POISON");
    poison_ = p && std::strcmp(p, "1") == 0;
}

void ScratchArena::reserve(uint64_t bytes) {
    SLUICE_ASSERT(used_ == 0 && overflow_.empty(), "ScratchArena::reserve during a pass");
    if (pinned_) host_pinning::unpin(align_up(base_.get()));
    pinned_ = false;
    capacity_ = aligned(bytes);
    base_ = capacity_ ? allocate(capacity_) : nullptr;
    // Activations cross to the GPU at every matmul under --device cuda: page-locked, they go straight from here
    // instead of through a staging copy.
    if (capacity_) pinned_ = host_pinning::pin(align_up(base_.get()), capacity_);
    if (poison_ && capacity_) std::memset(align_up(base_.get()), 0xFF, capacity_);
    high_water_ = 0;
    overflow_allocations_ = 0;
}

void* ScratchArena::carve(uint64_t bytes) {
    const uint64_t size = ScratchArena::bytes(bytes);
    void* p;
    if (used_ + size <= capacity_ && overflow_.empty()) {
        p = align_up(base_.get()) + used_;
    } else {
        overflow_.push_back(allocate(size));
        ++overflow_allocations_;
        p = align_up(overflow_.back().get());
        if (poison_) std::memset(p, 0xFF, size);
    }
    used_ += size;
    high_water_ = std::max(high_water_, used_);
    return p;
}

void ScratchArena::release(uint64_t mark, size_t chunks) {
    if (poison_ && mark < capacity_)
        std::memset(align_up(base_.get()) + mark, 0xFF, std::min(used_, capacity_) - mark);
    used_ = mark;
    overflow_.resize(chunks);
}

}  // namespace sluice
