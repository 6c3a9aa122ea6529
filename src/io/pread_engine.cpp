// pread thread-pool backend: n worker threads take chunks from a shared queue and pread them (files opened with
// O_DIRECT, or buffered). Buffered reads drop the bytes they pulled in from the page cache afterwards
// (POSIX_FADV_DONTNEED), so streaming a model does not grow the cache and push out everything else.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <deque>
#include <thread>

#include "io/os_io.h"
#include "io/read_engine.h"

namespace sluice::io {

namespace {

class PreadEngine final : public ReadEngine {
  public:
    PreadEngine(const std::vector<std::string>& paths, const std::vector<int>& fds, unsigned n_threads, bool direct)
        : ReadEngine(paths, fds, direct) {
        for (unsigned i = 0; i < n_threads; ++i) workers_.emplace_back([this] { work(); });
    }

    ~PreadEngine() override {
        drain();
        {
            std::lock_guard lock(mu_);
            stop_ = true;
        }
        cv_.notify_all();
        for (auto& t : workers_) t.join();
    }

    void enqueue(std::vector<ReadOp*> ops) override {
        note_enqueued(ops.size());
        {
            std::lock_guard lock(mu_);
            pending_.insert(pending_.end(), ops.begin(), ops.end());
        }
        if (ops.size() == 1)
            cv_.notify_one();
        else
            cv_.notify_all();
    }

  private:
    void work() {
        for (;;) {
            ReadOp* op = nullptr;
            {
                std::unique_lock lock(mu_);
                cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
                if (pending_.empty()) return;
                op = pending_.front();
                pending_.pop_front();
            }
            int fd = fds_[op->file];
            Step step;
            do {
                uint64_t start = op->file_offset;
                ssize_t n = ::pread(fd, op->dest, op->length, off_t(start));
                int64_t result = n < 0 ? -int64_t(errno) : int64_t(n);
                if (!direct_ && n > 0) drop_from_page_cache(fd, off_t(start), off_t(n));
                step = on_result(*op, result);
            } while (step == Step::Again);
            finish_op(op);
        }
    }

    std::vector<std::thread> workers_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<ReadOp*> pending_;
    bool stop_ = false;
};

}  // namespace

std::unique_ptr<ReadEngine> make_pread_engine(const std::vector<std::string>& paths, const std::vector<int>& fds,
                                              unsigned n_threads, bool direct) {
    return std::make_unique<PreadEngine>(paths, fds, n_threads, direct);
}

}  // namespace sluice::io
