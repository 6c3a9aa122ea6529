// DirectReader: batched reads of byte extents from a fixed set of files at full drive bandwidth. Files are opened
// once (O_DIRECT when the filesystem allows). A batch of extents is split into chunks that keep the queue deep;
// each extent's callback fires as soon as its last chunk lands, and ReadBatch::wait() blocks for the whole batch
// and throws a sluice::Error naming file and offset for the first failed extent. Backends: io_uring + O_DIRECT,
// a pread thread pool + O_DIRECT, and buffered pread with POSIX_FADV_DONTNEED; Auto picks the first that works.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "io/aligned_buffer.h"

namespace sluice::io {

enum class Backend { Auto, Uring, Pread, Buffered };
const char* backend_name(Backend b);
Backend parse_backend(const std::string& name);  // "auto", "uring", "pread", "buffered"; throws Error otherwise

struct ReaderOptions {
    Backend backend = Backend::Auto;
    unsigned queue_depth = 32;        // read ops in flight (io_uring SQ depth, or pread threads)
    uint64_t chunk_bytes = 1u << 20;  // large extents are split into reads of at most this (multiple of 4 KiB)
    bool register_files = true;       // io_uring: use fixed files
};

// One extent to read. The bytes [offset, offset + length) are read as the 4 KiB-aligned superset
// [align_down(offset), align_up(offset + length)) straight into dest, so dest must be 4 KiB-aligned and hold at
// least padded_bytes(offset, length). The requested bytes then start at dest + head_bytes(offset); when offset
// is aligned they start at dest itself and nothing is ever copied.
struct ReadExtent {
    uint32_t file = 0;        // index into the reader's file list
    uint64_t offset = 0;      // byte offset in the file
    uint64_t length = 0;      // bytes wanted (> 0)
    uint8_t* dest = nullptr;  // 4 KiB-aligned destination
    uint64_t dest_capacity = 0;
    uint64_t tag = 0;  // caller's cookie, echoed in the completion
};

inline uint64_t head_bytes(uint64_t offset) { return offset % k_direct_alignment_bytes; }
inline uint64_t padded_bytes(uint64_t offset, uint64_t length) {
    return align_up(offset + length, k_direct_alignment_bytes) - align_down(offset, k_direct_alignment_bytes);
}

struct ReadCompletion {
    size_t index = 0;  // position of the extent in its batch
    uint64_t tag = 0;
    const uint8_t* data = nullptr;  // the requested bytes (dest + head_bytes(offset)); null on error
    uint64_t length = 0;
    std::string error;  // empty on success; else names file, offset and cause
    bool ok() const { return error.empty(); }
};

// Called once per extent, on a reader thread, as soon as that extent is complete. Keep it short (hand work to
// another thread); it may submit new batches. Exceptions thrown from it are caught and reported by wait().
using CompletionFn = std::function<void(const ReadCompletion&)>;

// Test hook: make the nth read operation (1-based, counted from set_fault_plan) report a fault after it ran.
enum class FaultKind { None, Eio, ShortRead, Eof };
struct FaultPlan {
    FaultKind kind = FaultKind::None;
    uint64_t nth_read = 1;
    // Eio: the read fails with EIO. ShortRead: it returns fewer (4 KiB-multiple) bytes than asked, which the
    // reader must continue transparently. Eof: it returns 0 bytes, as a read past end of file does.
};

struct BatchState;
class ReadBatch {
  public:
    ReadBatch() = default;
    explicit ReadBatch(std::shared_ptr<BatchState> state) : state_(std::move(state)) {}
    // Blocks until every extent of the batch has completed; throws Error for the first failed extent.
    void wait();
    bool ready() const;
    // After ready(): per-extent error text (empty for success), in batch order.
    std::vector<std::string> errors() const;

  private:
    std::shared_ptr<BatchState> state_;
};

class ReadEngine;

class DirectReader {
  public:
    // Opens every file once. A file that cannot be opened does not throw here: requests on it fail (from wait)
    // with the open error, and the other files stay usable. Throws Error only if an explicitly requested backend
    // is unavailable (e.g. Uring when io_uring_setup is refused), naming the reason.
    explicit DirectReader(std::vector<std::string> paths, ReaderOptions options = {});
    ~DirectReader();  // waits for reads in flight
    DirectReader(const DirectReader&) = delete;
    DirectReader& operator=(const DirectReader&) = delete;

    Backend backend() const { return backend_; }
    bool direct() const { return direct_; }                                  // files opened with O_DIRECT
    const std::string& fallback_reason() const { return fallback_reason_; }  // why Auto did not get Uring
    unsigned queue_depth() const { return options_.queue_depth; }
    size_t n_files() const { return paths_.size(); }
    const std::string& path(uint32_t file) const { return paths_.at(file); }

    // io_uring only (a no-op elsewhere): registers buffers so reads landing wholly inside one use
    // READ_FIXED. Call with no reads in flight; replaces any earlier registration. Returns false (and logs once)
    // if the kernel refused, e.g. over RLIMIT_MEMLOCK; reads still work unregistered.
    bool register_buffers(std::span<AlignedBuffer* const> buffers);

    // Queues the extents and returns at once. Throws Error for a malformed extent (bad file index, zero length,
    // unaligned or too small dest) before anything is queued.
    ReadBatch submit(std::span<const ReadExtent> extents, CompletionFn on_complete = {});

    // Blocks until no read submitted to this reader is in flight. Errors stay with their batches.
    void drain();

    void set_fault_plan(const FaultPlan& plan);

    // Whether a backend works for a file at path on this machine (opens it, probes O_DIRECT and io_uring).
    static bool backend_available(Backend backend, const std::string& path, std::string* why_not = nullptr);

  private:
    friend class ReadEngine;
    std::vector<std::string> paths_;
    ReaderOptions options_;
    Backend backend_ = Backend::Buffered;
    bool direct_ = false;
    std::string fallback_reason_;
    std::vector<int> fds_;  // -1 where the open failed
    std::vector<std::string> open_errors_;
    std::unique_ptr<ReadEngine> engine_;
};

}  // namespace sluice::io
