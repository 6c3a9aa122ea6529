#include "experts/spine_warmer.h"

#include <fcntl.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/sendfile.h>
#endif

#include <algorithm>
#include <cerrno>

namespace sluice {

namespace {
constexpr uint64_t kChunkBytes = uint64_t(4) << 20;  // one pread; the kernel's readahead runs past it
}  // namespace

SpineWarmer::SpineWarmer(std::vector<std::string> paths, std::vector<std::vector<SpineExtent>> layers, int64_t depth)
    : paths_(std::move(paths)),
      fds_(paths_.size(), -1),
      layers_(std::move(layers)),
      depth_(std::max<int64_t>(0, depth)),
      asked_(layers_.size(), 0),
      buf_(new char[kChunkBytes]) {
    queue_.reserve(layers_.size());
    thread_ = std::thread([this] { run(); });
}

SpineWarmer::~SpineWarmer() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    for (int fd : fds_)
        if (fd >= 0) ::close(fd);
    if (null_fd_ >= 0) ::close(null_fd_);
}

void SpineWarmer::begin_layer(int64_t l) {
    const int64_t n = int64_t(layers_.size());
    if (l < 0 || l >= n || all_asked_.load(std::memory_order_relaxed)) return;
    bool any = false;
    {
        std::lock_guard<std::mutex> lock(mu_);
        for (int64_t k = l; k <= l + depth_ && k < n; ++k) {
            if (asked_[size_t(k)]) continue;
            asked_[size_t(k)] = 1;
            if (++n_asked_ == asked_.size()) all_asked_.store(true, std::memory_order_relaxed);
            if (layers_[size_t(k)].empty()) continue;
            queue_.push_back(k);
            any = true;
        }
    }
    if (any) cv_.notify_one();
}

void SpineWarmer::flush() {
    std::unique_lock<std::mutex> lock(mu_);
    idle_cv_.wait(lock, [&] { return next_ == queue_.size() && !busy_; });
}

SpineWarmStats SpineWarmer::stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
}

// One chunk into the page cache. On Linux, sendfile() to /dev/null: the same buffered read (readahead, blocking
// until the pages are there) with no copy into this process. On the K3-slice prefill the pread's copy was 18% of
// both cores' time in `perf` (kernel _copy_to_iter), beside the matmuls; sendfile reads 3 GB with a quarter of pread's
// system time. Where /dev/null or sendfile is refused, pread as before.
ssize_t SpineWarmer::read_chunk(int fd, off_t offset, size_t bytes) {
#if defined(__linux__)
    if (null_fd_ == -1) {
        null_fd_ = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (null_fd_ < 0) null_fd_ = -2;
    }
    if (null_fd_ >= 0) {
        off_t at = offset;
        const ssize_t got = ::sendfile(null_fd_, fd, &at, bytes);
        if (got >= 0) return got;
        if (errno != EINVAL && errno != ENOSYS) return got;
        ::close(null_fd_);
        null_fd_ = -2;  // refused: pread from now on
    }
#endif
    return ::pread(fd, buf_.get(), bytes, offset);
}

// Reads layer l's extents through the page cache (the bytes themselves are dropped). Only this thread touches fds_.
uint64_t SpineWarmer::read_layer(int64_t l) {
    uint64_t done = 0;
    for (const SpineExtent& e : layers_[size_t(l)]) {
        if (e.file >= fds_.size()) continue;
        int& fd = fds_[e.file];
        if (fd == -1) {
            fd = ::open(paths_[e.file].c_str(), O_RDONLY | O_CLOEXEC);
            if (fd < 0) fd = -2;
#if defined(POSIX_FADV_SEQUENTIAL)
            else
                (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);  // a larger readahead window
#endif
        }
        if (fd < 0) continue;  // the faults read it, as without the warmer
        for (uint64_t at = 0; at < e.length && !stop_.load(std::memory_order_relaxed);) {
            const size_t want = size_t(std::min(kChunkBytes, e.length - at));
            const ssize_t got = read_chunk(fd, off_t(e.offset + at), want);
            if (got <= 0) break;  // an error or a short file: left to the faults
            at += uint64_t(got);
            done += uint64_t(got);
        }
    }
    return done;
}

void SpineWarmer::run() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
        cv_.wait(lock, [&] { return stop_ || next_ < queue_.size(); });
        if (stop_) return;
        const int64_t l = queue_[next_++];
        busy_ = true;
        lock.unlock();
        const uint64_t bytes = read_layer(l);
        lock.lock();
        stats_.layers += 1;
        stats_.bytes += bytes;
        busy_ = false;
        if (next_ == queue_.size()) idle_cv_.notify_all();
    }
}

}  // namespace sluice
