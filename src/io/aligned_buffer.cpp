// AlignedBuffer: aligned_alloc-backed storage for O_DIRECT destinations.
#include "io/aligned_buffer.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace sluice::io {

AlignedBuffer::AlignedBuffer(size_t size_bytes, size_t alignment_bytes) {
    SLUICE_CHECK(alignment_bytes >= 64 && (alignment_bytes & (alignment_bytes - 1)) == 0, "AlignedBuffer: alignment ",
                 alignment_bytes, " is not a power of two >= 64");
    if (size_bytes == 0) return;
    size_t rounded = align_up(size_bytes, alignment_bytes);
    void* p = std::aligned_alloc(alignment_bytes, rounded);
    SLUICE_CHECK(p != nullptr, "AlignedBuffer: cannot allocate ", rounded, " bytes");
    std::memset(p, 0, rounded);
    data_ = static_cast<uint8_t*>(p);
    size_bytes_ = rounded;
    alignment_bytes_ = alignment_bytes;
}

AlignedBuffer::~AlignedBuffer() { release(); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_bytes_(std::exchange(other.size_bytes_, 0)),
      alignment_bytes_(std::exchange(other.alignment_bytes_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
    if (this != &other) {
        release();
        data_ = std::exchange(other.data_, nullptr);
        size_bytes_ = std::exchange(other.size_bytes_, 0);
        alignment_bytes_ = std::exchange(other.alignment_bytes_, 0);
    }
    return *this;
}

void AlignedBuffer::release() {
    std::free(data_);
    data_ = nullptr;
    size_bytes_ = 0;
}

}  // namespace sluice::io
