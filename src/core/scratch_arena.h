// Scratch memory for a forward pass's activations: one allocation, sized once for the largest pass the engine will
// run, carved by the blocks as a stack (a bump pointer; `Scope` gives back what was carved inside it), never zeroed
// (every carved buffer is fully written before it is read). What a pass carves is a function of the configuration
// and the pass's row count only, never of the data (an expert's buffers are carved for all rows of the layer, not
// the rows routed to it), so each architecture's activation_bytes(rows) formula equals the high-water mark exactly;
// the memory plan reserves that many bytes (models/expert_setup) and tests/unit/test_scratch_arena checks both.
//
// With SLUICE_SCRATCH_POISON=1 in the environment (tests), every byte is set to 0xFF (a NaN in f32) when reserved
// and again whenever a scope gives it back, so a buffer read before it is written shows up as NaN logits.
//
// A pass larger than the reservation still runs: what does not fit is allocated from the heap and freed when its
// scope ends (counted by overflow_allocations(), which a pass within the planned rows never increments).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace sluice {

class ScratchArena {
public:
    static constexpr uint64_t kAlignBytes = 64;  // every carve starts on a cache line
    static constexpr uint64_t aligned(uint64_t bytes) { return (bytes + kAlignBytes - 1) / kAlignBytes * kAlignBytes; }
    // The bytes a carve of n floats takes (what the activation formulas add up).
    static constexpr uint64_t f32_bytes(int64_t n) { return bytes(uint64_t(n) * sizeof(float)); }
    static constexpr uint64_t bytes(uint64_t n) { return aligned(n > 0 ? n : 1); }  // what carve(n) takes

    ScratchArena();
    ~ScratchArena();
    ScratchArena(const ScratchArena&) = delete;
    ScratchArena& operator=(const ScratchArena&) = delete;

    // One allocation of `bytes` (rounded up to the alignment), replacing any before; only between passes.
    void reserve(uint64_t bytes);
    uint64_t capacity_bytes() const { return capacity_; }

    // n floats, uninitialised, 64-byte aligned; valid until the innermost enclosing Scope ends.
    float* f32(int64_t n) { return static_cast<float*>(carve(uint64_t(n) * sizeof(float))); }
    void* carve(uint64_t bytes);

    // Gives back everything carved during its lifetime (scopes nest as a stack).
    class Scope {
    public:
        explicit Scope(ScratchArena& a) : a_(a), mark_(a.used_), chunks_(a.overflow_.size()) {}
        ~Scope() { a_.release(mark_, chunks_); }
        Scope(const Scope&) = delete;
        Scope& operator=(const Scope&) = delete;

    private:
        ScratchArena& a_;
        uint64_t mark_;
        size_t chunks_;
    };

    uint64_t used_bytes() const { return used_; }
    // The most bytes carved at once since the last reset_stats() (overflow included).
    uint64_t high_water_bytes() const { return high_water_; }
    // Heap allocations made because a pass needed more than the reservation, since the last reset_stats().
    uint64_t overflow_allocations() const { return overflow_allocations_; }
    void reset_stats() {
        high_water_ = used_;
        overflow_allocations_ = 0;
    }

private:
    void release(uint64_t mark, size_t chunks);

    std::unique_ptr<std::byte[]> base_;
    uint64_t capacity_ = 0;
    uint64_t used_ = 0;  // bytes carved (bump offset; past capacity_ the carves come from overflow_)
    uint64_t high_water_ = 0;
    uint64_t overflow_allocations_ = 0;
    bool poison_ = false;
    bool pinned_ = false;  // the reservation is page-locked (core/host_pinning.h)
    std::vector<std::unique_ptr<std::byte[]>> overflow_;
};

}  // namespace sluice
