// SpineWarmer: the resident spine's first reads, overlapped with compute. A resident layer's matrices are read
// through the checkpoint's memory map, so the first pass after a cold start faults them in a read-around at a time
// while the layer computes (on the K3 slice, 6.7 GB of spine read that way, synchronously, inside the prefill:
// docs/cpu.md). begin_layer(l) asks a background thread to read the next `depth` resident layers' bytes into the
// page cache, each layer once per process, so that by the time a layer runs its pages are there and its faults only
// map them. The reads are buffered reads of a few MiB (sendfile() to /dev/null on Linux: no copy into the process;
// else pread) on a file descriptor of its own, advised sequential (what
// the kernel reads ahead of them fills the cache too); madvise(MADV_WILLNEED) on the map was tried first and does
// nothing useful here: Linux caps each such call at one readahead window (force_page_cache_ra), so 5.7 GB of
// advice filled the page cache no faster than the faults did. The bytes are the ones the residency plan already
// counts as resident; the output's bits do not change; a read that fails is left to the faults.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <sys/types.h>

#include "experts/spine_streamer.h"

namespace sluice {

struct SpineWarmStats {
    uint64_t layers = 0;  // layers read
    uint64_t bytes = 0;   // bytes read
};

class SpineWarmer {
public:
    // layers[l]: the file extents of layer l's resident matrices (SpineExtent.file indexes paths; empty for a
    // streamed or weightless layer).
    SpineWarmer(std::vector<std::string> paths, std::vector<std::vector<SpineExtent>> layers, int64_t depth);
    ~SpineWarmer();
    SpineWarmer(const SpineWarmer&) = delete;
    SpineWarmer& operator=(const SpineWarmer&) = delete;

    // Layer l is about to run: queue those of layers l .. l + depth not queued yet (l itself only when the warmer
    // has not reached it: the first layer, or a jump).
    void begin_layer(int64_t l);
    // Waits until every read queued so far is done (tests).
    void flush();
    SpineWarmStats stats() const;

private:
    void run();
    uint64_t read_layer(int64_t l);
    ssize_t read_chunk(int fd, off_t offset, size_t bytes);  // bytes read into the page cache, or -1
    int null_fd_ = -1;  // /dev/null, the sink of sendfile(); -2: unavailable (pread)
    std::vector<std::string> paths_;
    std::vector<int> fds_;  // opened by the thread on first use; -1: not yet, -2: failed
    std::vector<std::vector<SpineExtent>> layers_;
    int64_t depth_;
    std::vector<char> asked_;  // per layer: queued once
    size_t n_asked_ = 0;
    std::atomic<bool> all_asked_{false};  // then begin_layer returns at once (every layer of every later pass)
    mutable std::mutex mu_;
    std::condition_variable cv_, idle_cv_;
    // layers queued, in order; each layer at most once, so reserved at construction: begin_layer never allocates
    std::vector<int64_t> queue_;
    size_t next_ = 0;  // queue_[next_] is the next to read
    std::unique_ptr<char[]> buf_;  // one pread's bytes where sendfile is refused (made at construction)
    bool busy_ = false;
    std::atomic<bool> stop_{false};  // also checked between the chunks of a read
    SpineWarmStats stats_;
    std::thread thread_;
};

}  // namespace sluice
