// ReadEngine: the backend-independent half of a read — turning syscall results into progress or a clear error,
// fault injection, and firing per-extent completions and batch wake-ups.
#include "io/read_engine.h"

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace sluice::io {

ReadEngine::ReadEngine(const std::vector<std::string>& paths, const std::vector<int>& fds, bool direct)
    : paths_(paths), fds_(fds), direct_(direct) {}

void ReadEngine::set_fault_plan(const FaultPlan& plan) {
    std::lock_guard lock(fault_mu_);
    fault_ = plan;
    reads_seen_ = 0;
}

void ReadEngine::note_enqueued(size_t n_ops) {
    std::lock_guard lock(drain_mu_);
    ops_outstanding_ += n_ops;
}

void ReadEngine::drain() {
    std::unique_lock lock(drain_mu_);
    drain_cv_.wait(lock, [&] { return ops_outstanding_ == 0; });
}

ReadEngine::Step ReadEngine::on_result(ReadOp& op, int64_t result) {
    {
        std::lock_guard lock(fault_mu_);
        ++reads_seen_;
        if (fault_.kind != FaultKind::None && reads_seen_ == fault_.nth_read) {
            if (fault_.kind == FaultKind::Eio) result = -EIO;
            if (fault_.kind == FaultKind::Eof) result = 0;
            if (fault_.kind == FaultKind::ShortRead && result > int64_t(k_direct_alignment_bytes))
                result = int64_t(align_down(uint64_t(result) / 2, k_direct_alignment_bytes));
        }
    }
    const ReadExtent& ext = op.batch->extents[op.extent].extent;
    auto where = [&] {
        return cat("file '", paths_[op.file], "' extent at offset ", ext.offset, " (", ext.length, " bytes)");
    };
    if (result == -EINTR || result == -EAGAIN) return Step::Again;
    if (result < 0) {
        record_error(
            *op.batch, op.extent,
            cat("read failed: ", where(), ", read at offset ", op.file_offset, ": ", std::strerror(int(-result))));
        return Step::Failed;
    }
    uint64_t n = std::min<uint64_t>(uint64_t(result), op.length);
    op.file_offset += n;
    op.dest += n;
    op.length -= n;
    op.needed -= std::min(n, op.needed);
    if (op.needed == 0) return Step::Done;
    if (n == 0 || (direct_ && n % k_direct_alignment_bytes != 0)) {
        record_error(*op.batch, op.extent,
                     cat("short read: ", where(), ": the file ends at byte ", op.file_offset,
                         " but the extent needs bytes up to ", ext.offset + ext.length, " (truncated file?)"));
        return Step::Failed;
    }
    return Step::Again;
}

void ReadEngine::record_error(BatchState& batch, uint32_t extent, const std::string& error) {
    std::lock_guard lock(batch.mu);
    if (batch.errors[extent].empty()) batch.errors[extent] = error;
}

void ReadEngine::fail_extent(const std::shared_ptr<BatchState>& batch, uint32_t extent, const std::string& error) {
    record_error(*batch, extent, error);
    complete_extent(*batch, extent);
}

void ReadEngine::finish_op(ReadOp* op) {
    std::shared_ptr<BatchState> batch = std::move(op->batch);
    uint32_t extent = op->extent;
    delete op;
    if (batch->extents[extent].ops_left.fetch_sub(1) == 1) complete_extent(*batch, extent);
    std::lock_guard lock(drain_mu_);
    if (--ops_outstanding_ == 0) drain_cv_.notify_all();
}

void ReadEngine::complete_extent(BatchState& batch, uint32_t extent) {
    const ReadExtent& ext = batch.extents[extent].extent;
    if (batch.callback) {
        ReadCompletion c;
        c.index = extent;
        c.tag = ext.tag;
        {
            std::lock_guard lock(batch.mu);
            c.error = batch.errors[extent];
        }
        if (c.ok()) {
            c.data = ext.dest + head_bytes(ext.offset);
            c.length = ext.length;
        }
        try {
            batch.callback(c);
        } catch (const std::exception& e) {
            record_error(
                batch, extent,
                cat("completion callback for file '", paths_[ext.file], "' offset ", ext.offset, " threw: ", e.what()));
        }
    }
    if (batch.extents_left.fetch_sub(1) == 1) {
        std::lock_guard lock(batch.mu);
        batch.done = true;
        batch.cv.notify_all();
    }
}

}  // namespace sluice::io
