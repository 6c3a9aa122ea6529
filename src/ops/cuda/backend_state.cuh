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

// Tensor cores for the exact-bf16 formats in whole 32-column blocks; plain FMAs otherwise. A function of the
// weight alone, like everything that decides a row's bits.
inline bool uses_mma(WeightFormat f, int64_t cols) {
    return (f == WeightFormat::BF16 || f == WeightFormat::MXFP4 || f == WeightFormat::INT4_G32 ||
            f == WeightFormat::FP8_E4M3_B128) && cols % 32 == 0;
}

// w is valid and its format runs on the card (else one clear error).
void check_weight(const Weight& w);

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
    bool mapped = false;  // of an add() range (the checkpoint's memory map: the resident spine), not content-keyed
    std::list<Key>::iterator lru;
    uint64_t group = 0;  // the last expert-group wave that placed it (Backend::open_group)
};

// Device memory a group of weight copies made for one call is placed in, bump-allocated.
struct Arena {
    uint8_t* base = nullptr;
    uint64_t cap = 0, used = 0;
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
               kda_.bytes + group_buf_.bytes;
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

    // An expert group's weights are all placed before its kernels run, so none of them may be evicted (their memory
    // reused) by the placing of the next: between open_group() and close_group() a copy placed is not evicted.
    void open_group() {
        ++group_epoch_;
        group_open_ = true;
    }
    void close_group() { group_open_ = false; }

    // Device pointers for w's bytes: a kept copy for stable bytes, else a copy made now into the transient buffer, or
    // with an arena, into the arena (data null when it has no room left).
    kernels::WDesc place(const Weight& w, Arena* arena = nullptr) {
        const uint64_t db = w.data_bytes(), sb = w.scales ? w.scale_bytes() : 0;
        const uint64_t scale_at = align_up(db, 256), total = scale_at + sb;
        kernels::WDesc d{int(w.format), w.rows, w.cols, nullptr, nullptr};
        const auto pd = stable_memory::find(w.data, db);
        const auto ps = sb ? stable_memory::find(w.scales, sb) : stable_memory::Place{pd.id, 0};
        if (pd.id && ps.id) {
            const Key k{pd.id, pd.offset_bytes, ps.id, ps.offset_bytes, w.rows, w.cols, int(w.format)};
            if (auto it = copies_.find(k); it != copies_.end()) {
                auto& list = it->second.mapped ? mapped_lru_ : lru_;
                list.splice(list.begin(), list, it->second.lru);
                it->second.group = group_epoch_;
                ++stats.weight_hits;
                return desc_at(d, it->second.dev, scale_at, sb);
            }
            if (make_room(total)) {
                const bool mapped = !stable_memory::is_content(pd.id) && !stable_memory::is_content(ps.id);
                auto& list = mapped ? mapped_lru_ : lru_;
                void* dev = nullptr;
                CK(cudaMallocAsync(&dev, total, stream_));
                upload(dev, w, scale_at);
                list.push_front(k);
                copies_[k] = {dev, total, mapped, list.begin(), group_epoch_};
                resident_bytes_ += total;
                ++stats.weight_misses;
                stats.resident_weight_bytes = resident_bytes_;
                return desc_at(d, dev, scale_at, sb);
            }
        }
        void* dev = nullptr;
        if (arena) {
            const uint64_t at = align_up(arena->used, 256);
            if (at + total > arena->cap) return d;
            dev = arena->base + at;
            arena->used = at + total;
        } else {
            dev = grow(transient_, total, "a weight copied for this call");
        }
        upload(dev, w, scale_at);
        return desc_at(d, dev, scale_at, sb);
    }

    DeviceBuffer x_, xs_, y_, part_, transient_;
    DeviceBuffer attn_kv_, attn_io_;  // attention (attention.cu): the keys and values; queries, positions, outputs
    DeviceBuffer kda_;                // KDA's delta rule (kda.cu): a piece of rows and the heads' state
    DeviceBuffer group_buf_;          // an expert group's activations (expert_group.cu)

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
    // Room for a new kept copy of `bytes` beside the workspace, made by evicting content-keyed copies (experts,
    // streamed spine layers), least recently used first; false (the caller copies for the call) when that is not
    // enough. A new copy never evicts a copy of the mapped checkpoint (the resident spine): every pass uses all of
    // those in the same order, and under LRU a spine larger than the room left would evict each copy just before its
    // next use and keep nothing (measured: 1% of weight uses from kept copies with a 4 GiB card budget for a 6 GiB
    // spine); kept as they are, the copies that fit serve every pass and only the rest goes up again.
    bool make_room(uint64_t bytes) {
        const uint64_t cap = budget(), ws = workspace_bytes();
        if (bytes + ws > cap) return false;
        sweep_dead_mapped();
        const uint64_t limit = cap - ws - bytes;
        evict_from(lru_, limit);
        stats.resident_weight_bytes = resident_bytes_;
        return resident_bytes_ <= limit;
    }
    // Frees copies until the kept ones take at most `limit` bytes: content-keyed first, then the mapped ones, least
    // recently used first in each (the work buffers' growth, which must fit).
    void evict_until(uint64_t limit) {
        sweep_dead_mapped();
        evict_from(lru_, limit);
        evict_from(mapped_lru_, limit);
        stats.resident_weight_bytes = resident_bytes_;
    }
    void evict_from(std::list<Key>& list, uint64_t limit) {
        while (resident_bytes_ > limit && !list.empty()) {
            const auto it = copies_.find(list.back());
            // the open group's copies are the most recently used: once one is last, the rest are all the group's
            if (group_open_ && it->second.group == group_epoch_) break;
            erase_copy(it, list);
        }
    }
    void erase_copy(std::unordered_map<Key, Copy, KeyHash>::iterator it, std::list<Key>& list) {
        CK(cudaFreeAsync(it->second.dev, stream_));  // after the work already queued that reads it
        resident_bytes_ -= it->second.bytes;
        list.erase(it->second.lru);
        copies_.erase(it);
    }
    // Mapped copies are never evicted for new ones, so those of a range that went away (a model unloaded) would stay
    // for good: freed here, once per removal seen.
    void sweep_dead_mapped() {
        const uint64_t r = stable_memory::removals();
        if (r == removals_seen_) return;
        removals_seen_ = r;
        for (auto k = mapped_lru_.begin(); k != mapped_lru_.end();) {
            auto next = std::next(k);
            if (!stable_memory::live(k->data_id) || !stable_memory::live(k->scale_id))
                erase_copy(copies_.find(*k), mapped_lru_);
            k = next;
        }
    }

    cudaStream_t stream_ = nullptr;
    cudaMemPool_t pool_ = nullptr;  // the device's default pool: kept weight copies
    uint64_t budget_bytes_ = 0;
    std::unordered_map<Key, Copy, KeyHash> copies_;
    std::list<Key> lru_;         // content-keyed copies, most recently used first
    std::list<Key> mapped_lru_;  // copies of the mapped checkpoint, most recently used first
    uint64_t removals_seen_ = 0;
    uint64_t resident_bytes_ = 0;
    uint64_t group_epoch_ = 0;
    bool group_open_ = false;
};

// The one backend (made at first use, never destroyed: kernels may be in flight at exit).
Backend& backend();

}  // namespace sluice::cuda::detail
