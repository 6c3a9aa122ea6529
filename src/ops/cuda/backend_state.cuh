// The CUDA backend's state, shared by the op files of ops/cuda/ (backend.cu owns it): the device's stream, the work
// buffers that grow within --gpu-memory, the device copies of stable weights and the pinned staging for activations.
// Host code compiled by nvcc only; backend.h is the interface the rest of sluice sees.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <unordered_map>

#include "core/error.h"
#include "core/stable_memory.h"
#include "ops/cuda/backend.h"
#include "ops/cuda/matmul_kernels.cuh"

namespace sluice::cuda::detail {

inline void check(cudaError_t e, const char* what) {
    if (e == cudaErrorMemoryAllocation)
        fail("CUDA: out of device memory (", what, "); lower --gpu-memory or the batch, or use --device cpu");
    if (e != cudaSuccess) fail("CUDA: ", what, ": ", cudaGetErrorString(e));
}
#define CK(call) ::sluice::cuda::detail::check((call), #call)

inline uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// A device buffer that only grows.
struct DeviceBuffer {
    void* p = nullptr;
    uint64_t bytes = 0;
    void* reserve(uint64_t need) {
        if (need > bytes) {
            if (p) CK(cudaFree(p));
            p = nullptr;
            bytes = 0;
            CK(cudaMalloc(&p, need));
            bytes = need;
        }
        return p;
    }
};

struct Key {
    uint64_t data_id, data_off, scale_id, scale_off;
    int64_t rows, cols;
    int format;
    bool operator==(const Key& o) const {
        return data_id == o.data_id && data_off == o.data_off && scale_id == o.scale_id && scale_off == o.scale_off &&
               rows == o.rows && cols == o.cols && format == o.format;
    }
};
struct KeyHash {
    size_t operator()(const Key& k) const {
        uint64_t h = k.data_id * 0x9E3779B97F4A7C15ull ^ k.data_off;
        h = h * 0x100000001B3ull ^ k.scale_id ^ (k.scale_off << 7) ^ uint64_t(k.rows) << 17 ^ uint64_t(k.cols) << 3;
        return size_t(h ^ uint64_t(k.format));
    }
};

struct Copy {
    void* dev = nullptr;
    uint64_t bytes = 0;
    std::list<Key>::iterator lru;
};

class Backend {
public:
    Backend() {
        std::string why;
        SLUICE_CHECK(usable(&why), "CUDA backend: ", why);
        CK(cudaSetDevice(0));
        CK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
        // Kept weight copies come from the device's stream-ordered pool, which keeps freed memory for the next copy
        // (an eviction is followed by an allocation of about the same size): no cudaMalloc, and no device-wide
        // synchronisation of cudaFree, per expert.
        CK(cudaDeviceGetDefaultMemPool(&pool_, 0));
        uint64_t keep = UINT64_MAX;
        CK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep));
    }

    std::mutex mu;
    cudaStream_t stream() const { return stream_; }

    uint64_t budget() {
        if (budget_bytes_ == 0) {
            size_t free_b = 0, total_b = 0;
            CK(cudaMemGetInfo(&free_b, &total_b));
            budget_bytes_ = uint64_t(double(free_b) * 0.9);
        }
        return budget_bytes_;
    }
    void set_budget(uint64_t b) { budget_bytes_ = b; }

    uint64_t workspace_bytes() const {
        return x_.bytes + xs_.bytes + y_.bytes + part_.bytes + transient_.bytes + attn_kv_.bytes + attn_io_.bytes +
               kda_.bytes;
    }

    // Grows a work buffer within the budget, evicting kept weight copies for room; when the work buffers alone would
    // pass the budget, the error names the least that would do.
    void* grow(DeviceBuffer& buf, uint64_t need, const char* what) {
        if (need <= buf.bytes) return buf.p;
        const uint64_t cap = budget(), after = workspace_bytes() - buf.bytes + need;
        SLUICE_CHECK(after <= cap, "CUDA: ", what, " needs ", need, " bytes of device memory; with the other work "
                     "buffers that is ", after, " bytes, over the --gpu-memory budget of ", cap,
                     " bytes: give at least ", after, " (plus room for kept weights), or use a smaller batch");
        const uint64_t kept = resident_bytes_;
        evict_until(cap - after);
        if (resident_bytes_ < kept) {  // the work buffers use cudaMalloc: give the evicted copies' memory back
            CK(cudaStreamSynchronize(stream_));
            CK(cudaMemPoolTrimTo(pool_, 0));
        }
        return buf.reserve(need);
    }

    // Device pointers for w's bytes: a kept copy for stable bytes, else a copy made now into the transient buffer.
    kernels::WDesc place(const Weight& w) {
        const uint64_t db = w.data_bytes(), sb = w.scales ? w.scale_bytes() : 0;
        const uint64_t scale_at = align_up(db, 256), total = scale_at + sb;
        kernels::WDesc d{int(w.format), w.rows, w.cols, nullptr, nullptr};
        const auto pd = stable_memory::find(w.data, db);
        const auto ps = sb ? stable_memory::find(w.scales, sb) : stable_memory::Place{pd.id, 0};
        if (pd.id && ps.id) {
            const Key k{pd.id, pd.offset_bytes, ps.id, ps.offset_bytes, w.rows, w.cols, int(w.format)};
            if (auto it = copies_.find(k); it != copies_.end()) {
                lru_.splice(lru_.begin(), lru_, it->second.lru);
                ++stats.weight_hits;
                return desc_at(d, it->second.dev, scale_at, sb);
            }
            if (make_room(total)) {
                void* dev = nullptr;
                CK(cudaMallocAsync(&dev, total, stream_));
                upload(dev, w, scale_at);
                lru_.push_front(k);
                copies_[k] = {dev, total, lru_.begin()};
                resident_bytes_ += total;
                ++stats.weight_misses;
                stats.resident_weight_bytes = resident_bytes_;
                return desc_at(d, dev, scale_at, sb);
            }
        }
        void* dev = grow(transient_, total, "a weight copied for this call");
        upload(dev, w, scale_at);
        return desc_at(d, dev, scale_at, sb);
    }

    DeviceBuffer x_, xs_, y_, part_, transient_;
    DeviceBuffer attn_kv_, attn_io_;  // attention (attention.cu): the keys and values; queries, positions, outputs
    DeviceBuffer kda_;                // KDA's delta rule (kda.cu): a piece of rows and the heads' state

    // Host ranges page-locked by pin_host (start -> bytes); the caller holds mu.
    std::map<uintptr_t, uint64_t> pinned_ranges;
    bool is_pinned(const void* p, uint64_t bytes) const {
        const auto a = reinterpret_cast<uintptr_t>(p);
        auto it = pinned_ranges.upper_bound(a);
        if (it == pinned_ranges.begin()) return false;
        --it;
        return a + bytes <= it->first + it->second;
    }

    // Five events a matmul call records around its steps (made at first use, reused by every call under mu).
    cudaEvent_t* call_events() {
        if (!call_events_[0])
            for (auto& e : call_events_) CK(cudaEventCreate(&e));
        return call_events_;
    }
    cudaEvent_t call_events_[5] = {};

    void* hx_ = nullptr;  // pinned staging for activations in and results out
    uint64_t hx_bytes_ = 0;
    Stats stats;

    void* pinned(uint64_t need) {
        if (need > hx_bytes_) {
            if (hx_) CK(cudaFreeHost(hx_));
            hx_ = nullptr;
            hx_bytes_ = 0;
            CK(cudaMallocHost(&hx_, need));
            hx_bytes_ = need;
        }
        return hx_;
    }

private:
    static kernels::WDesc desc_at(kernels::WDesc d, void* dev, uint64_t scale_at, uint64_t sb) {
        d.data = static_cast<const uint8_t*>(dev);
        d.scales = sb ? d.data + scale_at : nullptr;
        return d;
    }
    void upload(void* dev, const Weight& w, uint64_t scale_at) {
        const uint64_t db = w.data_bytes(), sb = w.scales ? w.scale_bytes() : 0;
        CK(cudaMemcpyAsync(dev, w.data, db, cudaMemcpyHostToDevice, stream_));
        if (sb)
            CK(cudaMemcpyAsync(static_cast<uint8_t*>(dev) + scale_at, w.scales, sb, cudaMemcpyHostToDevice, stream_));
        stats.h2d_bytes += db + sb;
        stats.weight_upload_bytes += db + sb;
    }
    // Evicts least recently used copies until `bytes` more fit beside the workspace; false if they never can.
    bool make_room(uint64_t bytes) {
        const uint64_t cap = budget(), ws = workspace_bytes();
        if (bytes + ws > cap) return false;
        evict_until(cap - ws - bytes);
        return resident_bytes_ + bytes + ws <= cap;
    }
    // Frees least recently used copies until the kept ones take at most `limit` bytes.
    void evict_until(uint64_t limit) {
        while (resident_bytes_ > limit && !lru_.empty()) {
            auto it = copies_.find(lru_.back());
            CK(cudaFreeAsync(it->second.dev, stream_));  // after the work already queued that reads it
            resident_bytes_ -= it->second.bytes;
            copies_.erase(it);
            lru_.pop_back();
        }
        stats.resident_weight_bytes = resident_bytes_;
    }

    cudaStream_t stream_ = nullptr;
    cudaMemPool_t pool_ = nullptr;  // the device's default pool: kept weight copies
    uint64_t budget_bytes_ = 0;
    std::unordered_map<Key, Copy, KeyHash> copies_;
    std::list<Key> lru_;
    uint64_t resident_bytes_ = 0;
};

// The one backend (made at first use, never destroyed: kernels may be in flight at exit).
Backend& backend();

}  // namespace sluice::cuda::detail
