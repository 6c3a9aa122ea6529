// io_uring backend: one ring of queue_depth entries, fed from a pending queue under a mutex by submitters and by
// the reaper thread, which waits for completions, continues partial reads and retires finished ones. Reads into
// registered buffers use READ_FIXED; files are registered (IOSQE_FIXED_FILE) when the kernel allows.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "io/read_engine.h"

#ifdef SLUICE_HAVE_URING
#include <liburing.h>
#include <sys/uio.h>
#endif

namespace sluice::io {

#ifdef SLUICE_HAVE_URING
namespace {

constexpr uint64_t k_stop_tag = 0;

class UringEngine final : public ReadEngine {
  public:
    UringEngine(const std::vector<std::string>& paths, const std::vector<int>& fds, unsigned queue_depth,
                bool register_files)
        : ReadEngine(paths, fds, true), queue_depth_(queue_depth) {
        int rc = io_uring_queue_init(queue_depth, &ring_, 0);
        if (rc < 0)
            fail("io_uring_setup refused (", std::strerror(-rc),
                 rc == -ENOSYS || rc == -EPERM ? "; disabled by the kernel, sysctl or a seccomp filter" : "", ")");
        if (register_files && !fds.empty()) {
            rc = io_uring_register_files(&ring_, fds.data(), unsigned(fds.size()));
            fixed_files_ = rc == 0;
            if (rc < 0) log_debug("io_uring: file registration refused (", std::strerror(-rc), "); using plain fds");
        }
        reaper_ = std::thread([this] { reap_loop(); });
    }

    ~UringEngine() override {
        drain();
        {
            std::lock_guard lock(mu_);
            io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
            SLUICE_ASSERT(sqe != nullptr, "io_uring: no SQE for the stop request with nothing in flight");
            io_uring_prep_nop(sqe);
            io_uring_sqe_set_data64(sqe, k_stop_tag);
            submit_locked();
        }
        reaper_.join();
        io_uring_queue_exit(&ring_);
    }

    void enqueue(std::vector<ReadOp*> ops) override {
        note_enqueued(ops.size());
        std::lock_guard lock(mu_);
        pending_.insert(pending_.end(), ops.begin(), ops.end());
        fill_locked();
    }

    bool register_buffers(std::span<AlignedBuffer* const> buffers) override {
        drain();
        std::lock_guard lock(mu_);
        if (!regions_.empty()) io_uring_unregister_buffers(&ring_);
        regions_.clear();
        if (buffers.empty()) return true;
        std::vector<iovec> iov;
        for (AlignedBuffer* b : buffers) {
            SLUICE_CHECK(b != nullptr && !b->empty(), "register_buffers: empty buffer");
            iov.push_back({b->data(), b->size_bytes()});
        }
        int rc = io_uring_register_buffers(&ring_, iov.data(), unsigned(iov.size()));
        if (rc < 0) {
            log_info("io_uring: buffer registration refused (", std::strerror(-rc),
                     rc == -ENOMEM ? "; RLIMIT_MEMLOCK too low?" : "", "); reading into unregistered buffers");
            return false;
        }
        for (size_t i = 0; i < iov.size(); ++i) {
            auto* p = static_cast<uint8_t*>(iov[i].iov_base);
            regions_.push_back({p, p + iov[i].iov_len, int(i)});
        }
        std::sort(regions_.begin(), regions_.end(), [](auto& a, auto& b) { return a.begin < b.begin; });
        return true;
    }

  private:
    struct Region {
        uint8_t* begin;
        uint8_t* end;
        int index;
    };

    int buffer_index(const uint8_t* p, uint64_t n) const {
        auto it = std::upper_bound(regions_.begin(), regions_.end(), p,
                                   [](const uint8_t* q, const Region& r) { return q < r.begin; });
        if (it == regions_.begin()) return -1;
        --it;
        return p >= it->begin && p + n <= it->end ? it->index : -1;
    }

    void fill_locked() {
        unsigned added = 0;
        while (inflight_ < queue_depth_ && !pending_.empty()) {
            io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
            if (sqe == nullptr) break;
            ReadOp* op = pending_.front();
            pending_.pop_front();
            int fd = fixed_files_ ? int(op->file) : fds_[op->file];
            unsigned len = unsigned(op->length);
            int buf = buffer_index(op->dest, op->length);
            if (buf >= 0)
                io_uring_prep_read_fixed(sqe, fd, op->dest, len, op->file_offset, buf);
            else
                io_uring_prep_read(sqe, fd, op->dest, len, op->file_offset);
            if (fixed_files_) sqe->flags |= IOSQE_FIXED_FILE;
            io_uring_sqe_set_data64(sqe, reinterpret_cast<uint64_t>(op));
            ++inflight_;
            ++added;
        }
        if (added > 0) submit_locked();
    }

    void submit_locked() {
        for (;;) {
            int rc = io_uring_submit(&ring_);
            if (rc >= 0) return;
            if (rc == -EINTR || rc == -EAGAIN || rc == -EBUSY) {
                std::this_thread::yield();
                continue;
            }
            SLUICE_ASSERT(false, "io_uring_submit failed: ", std::strerror(-rc));
        }
    }

    void reap_loop() {
        std::vector<ReadOp*> again, finished;
        io_uring_cqe* cqes[64];
        bool stop = false;
        while (!stop) {
            io_uring_cqe* first = nullptr;
            int rc = io_uring_wait_cqe(&ring_, &first);
            if (rc == -EINTR || rc == -EAGAIN) continue;
            SLUICE_ASSERT(rc == 0, "io_uring_wait_cqe failed: ", std::strerror(-rc));
            // The lock also orders this thread after the submitter that filled the ops (the hand-over through
            // the kernel is invisible to thread sanitizers).
            {
                std::lock_guard lock(mu_);
                unsigned n = io_uring_peek_batch_cqe(&ring_, cqes, 64);
                unsigned reads = 0;
                for (unsigned i = 0; i < n; ++i) {
                    uint64_t tag = io_uring_cqe_get_data64(cqes[i]);
                    if (tag == k_stop_tag) {
                        stop = true;
                        continue;
                    }
                    ++reads;
                    auto* op = reinterpret_cast<ReadOp*>(tag);
                    Step step = on_result(*op, cqes[i]->res);
                    (step == Step::Again ? again : finished).push_back(op);
                }
                io_uring_cq_advance(&ring_, n);
                inflight_ -= reads;
                pending_.insert(pending_.begin(), again.begin(), again.end());
                fill_locked();
            }
            again.clear();
            for (ReadOp* op : finished) finish_op(op);
            finished.clear();
        }
    }

    io_uring ring_{};
    unsigned queue_depth_;
    bool fixed_files_ = false;
    std::thread reaper_;
    std::mutex mu_;
    std::deque<ReadOp*> pending_;
    unsigned inflight_ = 0;
    std::vector<Region> regions_;
};

}  // namespace

std::unique_ptr<ReadEngine> make_uring_engine(const std::vector<std::string>& paths, const std::vector<int>& fds,
                                              unsigned queue_depth, bool register_files) {
    return std::make_unique<UringEngine>(paths, fds, queue_depth, register_files);
}

#else

std::unique_ptr<ReadEngine> make_uring_engine(const std::vector<std::string>&, const std::vector<int>&, unsigned,
                                              bool) {
    fail("io_uring unavailable: sluice was built without liburing");
}

#endif

}  // namespace sluice::io
