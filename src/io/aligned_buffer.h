// AlignedBuffer: an owned, zero-initialised block of memory whose start and size are multiples of an alignment
// (4 KiB by default), the form O_DIRECT reads need. Move-only RAII. A DirectReader can register buffers with
// io_uring (DirectReader::register_buffers) so reads into them skip the per-request page pinning.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice::io {

inline constexpr size_t k_direct_alignment_bytes = 4096;

inline constexpr uint64_t align_down(uint64_t v, uint64_t a) { return v / a * a; }
inline constexpr uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

class AlignedBuffer {
  public:
    AlignedBuffer() = default;
    // size_bytes is rounded up to a multiple of alignment_bytes (a power of two >= 64). Throws Error if the
    // allocation fails.
    explicit AlignedBuffer(size_t size_bytes, size_t alignment_bytes = k_direct_alignment_bytes);
    ~AlignedBuffer();
    AlignedBuffer(AlignedBuffer&& other) noexcept;
    AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
    AlignedBuffer(const AlignedBuffer&) = delete;
    AlignedBuffer& operator=(const AlignedBuffer&) = delete;

    uint8_t* data() { return data_; }
    const uint8_t* data() const { return data_; }
    size_t size_bytes() const { return size_bytes_; }
    size_t alignment_bytes() const { return alignment_bytes_; }
    bool empty() const { return size_bytes_ == 0; }

  private:
    void release();

    uint8_t* data_ = nullptr;
    size_t size_bytes_ = 0;
    size_t alignment_bytes_ = 0;
};

}  // namespace sluice::io
