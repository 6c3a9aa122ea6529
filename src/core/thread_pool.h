// A fixed pool of worker threads with one primitive: parallel_for over [0, n) split into contiguous ranges.
// The split depends only on n and the thread count, so results are deterministic for a given thread count.
// parallel_for_dynamic hands out fixed-size ranges to whichever thread is free, for split-independent work.
// Idle workers spin for a short while (kSpinUs) before sleeping, and so does the caller waiting for them: a decode
// pass is thousands of short parallel_for calls, and waking a sleeping thread costs tens of microseconds (more in
// a virtual machine), which was a third of a 0.6 ms expert matmul on 2 cores.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/function_ref.h"

namespace sluice {

// fn(begin, end), borrowed (core/function_ref.h): the pool calls it only while parallel_for runs.
using RangeFn = FunctionRef<void(int64_t, int64_t)>;

class ThreadPool {
public:
    explicit ThreadPool(int n_threads);  // n_threads <= 0: hardware concurrency
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int n_threads() const { return n_threads_; }

    // Calls fn(begin, end) on disjoint ranges covering [0, n); blocks until all are done. Ranges are at least
    // min_chunk long (except the last). Exceptions thrown by fn are rethrown here (the first one).
    void parallel_for(int64_t n, RangeFn fn, int64_t min_chunk = 1);

    // Calls fn on [0, grain), [grain, 2 grain), ... (the last one shorter), each range on whichever thread is free
    // next; blocks until all are done. For work whose results do not depend on which thread runs a range (rows of
    // a matmul): threads that finish early take more ranges, where an even split waits for the slowest thread.
    void parallel_for_dynamic(int64_t n, int64_t grain, RangeFn fn);

private:
    void worker(int index);
    void run(int64_t n, int parts, int64_t chunk, int64_t grain, RangeFn fn);
    void run_share(int index, RangeFn fn);  // this thread's ranges of the job

    int n_threads_;
    std::vector<std::thread> workers_;
    std::mutex mu_;
    std::condition_variable cv_start_, cv_done_;
    const RangeFn* job_ = nullptr;
    int64_t job_n_ = 0, job_chunk_ = 0, job_grain_ = 0;  // job_grain_ > 0: dynamic ranges taken from next_
    std::atomic<int64_t> next_{0};
    int job_parts_ = 0;
    std::atomic<uint64_t> generation_{0};  // written under mu_; read by spinning workers without it
    std::atomic<int> pending_{0};          // workers still running the current job
    int sleepers_ = 0;                     // workers waiting on cv_start_ (under mu_)
    bool caller_sleeping_ = false;         // the caller waits on cv_done_ (under mu_)
    bool stop_ = false;                    // under mu_
    std::exception_ptr error_;
};

// The process-wide pool (created on first use with the count given to set_default_threads, or all cores).
ThreadPool& default_pool();
void set_default_threads(int n_threads);

}  // namespace sluice
