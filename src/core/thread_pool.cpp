#include "core/thread_pool.h"

#include <algorithm>
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
    }
    cv_start_.notify_all();
    for (auto& t : workers_) t.join();
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk) {
    if (n <= 0) return;
    min_chunk = std::max<int64_t>(1, min_chunk);
    int parts = int(std::min<int64_t>(n_threads_, (n + min_chunk - 1) / min_chunk));
    if (parts <= 1) {
        fn(0, n);
        return;
    }
    {
        std::lock_guard<std::mutex> lock(mu_);
        job_ = &fn;
        job_n_ = n;
        job_parts_ = parts;
        job_chunk_ = (n + parts - 1) / parts;
        pending_ = parts - 1;
        error_ = nullptr;
        ++generation_;
    }
    cv_start_.notify_all();
    try {
        fn(0, std::min(n, job_chunk_));
    } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_done_.wait(lock, [this] { return pending_ == 0; });
    job_ = nullptr;
    if (error_) std::rethrow_exception(error_);
}

void ThreadPool::worker(int index) {
    uint64_t seen = 0;
    for (;;) {
        const std::function<void(int64_t, int64_t)>* job;
        int64_t begin, end;
        {
            std::unique_lock<std::mutex> lock(mu_);
            cv_start_.wait(lock, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
            if (index >= job_parts_) continue;
            job = job_;
            begin = std::min(job_n_, index * job_chunk_);
            end = std::min(job_n_, begin + job_chunk_);
        }
        try {
            if (begin < end) (*job)(begin, end);
        } catch (...) {
            std::lock_guard<std::mutex> lock(mu_);
            if (!error_) error_ = std::current_exception();
        }
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (--pending_ == 0) cv_done_.notify_all();
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
