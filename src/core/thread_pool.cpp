#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <memory>

namespace sluice {

ThreadPool::ThreadPool(int n_threads) {
    if (n_threads <= 0) n_threads = int(std::max(1u, std::thread::hardware_concurrency()));
    n_threads_ = n_threads;
    for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
        ++generation_;
    }
    cv_start_.notify_all();
    for (auto& t : workers_) t.join();
}

namespace {

constexpr int64_t kSpinUs = 200;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

// Polls done() until it holds or kSpinUs have passed; true if it holds. After a short busy spin the thread yields
// between polls, so a spinning pool does not starve other runnable threads (other processes, or more pool threads
// than cores) of the core.
template <class Done>
bool spin_until(Done done) {
    for (int i = 0; i < 256; ++i) {
        if (done()) return true;
        cpu_relax();
    }
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
        if (done()) return true;
        std::this_thread::yield();
        if (std::chrono::steady_clock::now() - start > std::chrono::microseconds(kSpinUs)) return done();
    }
}

}  // namespace

void ThreadPool::parallel_for(int64_t n, RangeFn fn, int64_t min_chunk) {
    if (n <= 0) return;
    min_chunk = std::max<int64_t>(1, min_chunk);
    const int parts = int(std::min<int64_t>(n_threads_, (n + min_chunk - 1) / min_chunk));
    if (parts <= 1) return fn(0, n);
    run(n, parts, (n + parts - 1) / parts, 0, fn);
}

void ThreadPool::parallel_for_dynamic(int64_t n, int64_t grain, RangeFn fn) {
    if (n <= 0) return;
    grain = std::max<int64_t>(1, grain);
    const int parts = int(std::min<int64_t>(n_threads_, (n + grain - 1) / grain));
    if (parts <= 1) return fn(0, n);
    run(n, parts, 0, grain, fn);
}

void ThreadPool::run(int64_t n, int parts, int64_t chunk, int64_t grain,
                     RangeFn fn) {
    bool wake;
    {
        std::lock_guard<std::mutex> lock(mu_);
        job_ = &fn;
        job_n_ = n;
        job_parts_ = parts;
        job_chunk_ = chunk;
        job_grain_ = grain;
        next_.store(0, std::memory_order_relaxed);
        pending_.store(parts - 1);  // workers 1 .. parts-1 report; the others only note the generation
        error_ = nullptr;
        generation_.fetch_add(1, std::memory_order_release);
        wake = sleepers_ > 0;
    }
    if (wake) cv_start_.notify_all();
    run_share(0, fn);
    if (!spin_until([this] { return pending_.load(std::memory_order_acquire) == 0; })) {
        std::unique_lock<std::mutex> lock(mu_);
        caller_sleeping_ = true;
        cv_done_.wait(lock, [this] { return pending_.load(std::memory_order_acquire) == 0; });
        caller_sleeping_ = false;
    }
    std::lock_guard<std::mutex> lock(mu_);
    job_ = nullptr;
    if (error_) std::rethrow_exception(error_);
}

// The job's fields are read here without the lock: they were written before the generation this thread saw
// (release/acquire), and the caller does not change them until every share has reported.
void ThreadPool::run_share(int index, RangeFn fn) {
    try {
        if (job_grain_ == 0) {
            const int64_t begin = std::min(job_n_, index * job_chunk_), end = std::min(job_n_, begin + job_chunk_);
            if (begin < end) fn(begin, end);
        } else {
            for (;;) {
                const int64_t begin = next_.fetch_add(job_grain_, std::memory_order_relaxed);
                if (begin >= job_n_) break;
                fn(begin, std::min(job_n_, begin + job_grain_));
            }
        }
    } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
    }
}

void ThreadPool::worker(int index) {
    uint64_t seen = 0;
    for (;;) {
        const auto fresh = [&] { return generation_.load(std::memory_order_acquire) != seen; };
        if (!spin_until(fresh)) {
            std::unique_lock<std::mutex> lock(mu_);
            ++sleepers_;
            cv_start_.wait(lock, fresh);
            --sleepers_;
        }
        const RangeFn* job;
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (stop_) return;
            seen = generation_.load(std::memory_order_relaxed);
            if (index >= job_parts_) continue;
            job = job_;
        }
        run_share(index, *job);
        if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
            std::lock_guard<std::mutex> lock(mu_);
            if (caller_sleeping_) cv_done_.notify_all();
        }
    }
}

namespace {
int g_default_threads = 0;
std::unique_ptr<ThreadPool> g_pool;
std::mutex g_pool_mu;
}  // namespace

ThreadPool& default_pool() {
    std::lock_guard<std::mutex> lock(g_pool_mu);
    if (!g_pool) g_pool = std::make_unique<ThreadPool>(g_default_threads);
    return *g_pool;
}

void set_default_threads(int n_threads) {
    std::lock_guard<std::mutex> lock(g_pool_mu);
    if (g_pool && g_pool->n_threads() == n_threads) return;
    g_default_threads = n_threads;
    g_pool.reset();
}

}  // namespace sluice
