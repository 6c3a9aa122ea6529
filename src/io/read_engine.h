// Internal to DirectReader: the per-read bookkeeping shared by all backends (ReadOp = one chunk in flight,
// BatchState = one submitted batch), the result handling every backend applies to a finished syscall (partial
// reads continue, EOF and errors become a message naming file and offset, fault injection), and the factories
// for the io_uring and pread-pool engines.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "io/direct_reader.h"

namespace sluice::io {

struct ExtentState {
    ReadExtent extent;
    std::atomic<uint32_t> ops_left{0};
};

struct BatchState {
    BatchState(size_t n, CompletionFn fn)
        : extents(n), errors(n), callback(std::move(fn)), extents_left(n), done(n == 0) {}
    std::vector<ExtentState> extents;
    std::vector<std::string> errors;  // guarded by mu
    CompletionFn callback;
    std::atomic<size_t> extents_left;
    std::mutex mu;
    std::condition_variable cv;
    bool done;
};

struct ReadOp {
    std::shared_ptr<BatchState> batch;
    uint32_t extent = 0;
    uint32_t file = 0;
    uint64_t file_offset = 0;  // where the next read starts (aligned while reads are full)
    uint8_t* dest = nullptr;   // where its bytes go
    uint64_t length = 0;       // bytes still to request
    uint64_t needed = 0;       // of those, bytes the extent actually needs
};

class ReadEngine {
  public:
    ReadEngine(const std::vector<std::string>& paths, const std::vector<int>& fds, bool direct);
    virtual ~ReadEngine() = default;

    // Takes ownership of the ops and starts them.
    virtual void enqueue(std::vector<ReadOp*> ops) = 0;
    virtual bool register_buffers(std::span<AlignedBuffer* const> buffers) { return true; }

    void drain();
    void set_fault_plan(const FaultPlan& plan);
    // Completes one extent with an error without reading (e.g. its file failed to open).
    void fail_extent(const std::shared_ptr<BatchState>& batch, uint32_t extent, const std::string& error);

  protected:
    enum class Step { Done, Again, Failed };
    // Applies a finished read's result (bytes, or -errno) to op; on Failed the error is recorded on its extent.
    Step on_result(ReadOp& op, int64_t result);
    // Retires an op whose Step was Done or Failed: fires the extent's callback when it was the last op.
    void finish_op(ReadOp* op);
    // Must be called (once per op) by enqueue before the op can finish.
    void note_enqueued(size_t n_ops);

    const std::vector<std::string>& paths_;
    const std::vector<int>& fds_;
    const bool direct_;

  private:
    void record_error(BatchState& batch, uint32_t extent, const std::string& error);
    void complete_extent(BatchState& batch, uint32_t extent);

    std::mutex fault_mu_;
    FaultPlan fault_;
    uint64_t reads_seen_ = 0;
    std::mutex drain_mu_;
    std::condition_variable drain_cv_;
    uint64_t ops_outstanding_ = 0;
};

// Throw Error (with the kernel's reason) when the backend cannot start.
std::unique_ptr<ReadEngine> make_uring_engine(const std::vector<std::string>& paths, const std::vector<int>& fds,
                                              unsigned queue_depth, bool register_files);
std::unique_ptr<ReadEngine> make_pread_engine(const std::vector<std::string>& paths, const std::vector<int>& fds,
                                              unsigned n_threads, bool direct);

}  // namespace sluice::io
