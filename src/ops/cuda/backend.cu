// The CUDA backend's host side: the device, its stream, the workspace, and the device copies of stable weights.
#include "ops/cuda/backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <list>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/stable_memory.h"
#include "ops/cuda/matmul_kernels.cuh"

namespace sluice::cuda {

namespace {

void check(cudaError_t e, const char* what) {
    if (e == cudaErrorMemoryAllocation)
        fail("CUDA: out of device memory (", what, "); lower --gpu-memory or the batch, or use --device cpu");
    if (e != cudaSuccess) fail("CUDA: ", what, ": ", cudaGetErrorString(e));
}
#define CK(call) check((call), #call)

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

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

    uint64_t workspace_bytes() const { return x_.bytes + xs_.bytes + y_.bytes + part_.bytes + transient_.bytes; }

    // Grows a work buffer within the budget, evicting kept weight copies for room; when the work buffers alone would
    // pass the budget, the error names the least that would do.
    void* grow(DeviceBuffer& buf, uint64_t need, const char* what) {
        if (need <= buf.bytes) return buf.p;
        const uint64_t cap = budget(), after = workspace_bytes() - buf.bytes + need;
        SLUICE_CHECK(after <= cap, "CUDA: ", what, " needs ", need, " bytes of device memory; with the other work "
                     "buffers that is ", after, " bytes, over the --gpu-memory budget of ", cap,
                     " bytes: give at least ", after, " (plus room for kept weights), or use a smaller batch");
        evict_until(cap - after);
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
                CK(cudaMalloc(&dev, total));
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
            CK(cudaStreamSynchronize(stream_));  // a kernel may still read it
            CK(cudaFree(it->second.dev));
            resident_bytes_ -= it->second.bytes;
            copies_.erase(it);
            lru_.pop_back();
        }
        stats.resident_weight_bytes = resident_bytes_;
    }

    cudaStream_t stream_ = nullptr;
    uint64_t budget_bytes_ = 0;
    std::unordered_map<Key, Copy, KeyHash> copies_;
    std::list<Key> lru_;
    uint64_t resident_bytes_ = 0;
};

uint64_t g_budget_request = 0;

Backend& backend() {
    static Backend* b = [] {
        auto* p = new Backend();
        if (g_budget_request) p->set_budget(g_budget_request);
        return p;
    }();
    return *b;
}

// Tensor cores for the exact-bf16 formats in whole 32-column blocks; plain FMAs otherwise. A function of the
// weight alone, like everything that decides a row's bits.
bool uses_mma(WeightFormat f, int64_t cols) {
    return (f == WeightFormat::BF16 || f == WeightFormat::MXFP4 || f == WeightFormat::INT4_G32 ||
            f == WeightFormat::FP8_E4M3_B128) && cols % 32 == 0;
}

void run_matmul(Backend& b, const kernels::WDesc& w, const float* x_dev, int64_t n, float* y_dev) {
    const cudaStream_t s = b.stream();
    if (!uses_mma(WeightFormat(w.format), w.cols)) {
        kernels::ffma_matmul(w, x_dev, n, y_dev, s);
    } else {
        kernels::MmaArgs a{nullptr, x_dev, n, y_dev, k_splits(w.rows, w.cols), nullptr};
        if (!kernels::mma_splits_itself(n)) {
            const int64_t count = n * w.cols;
            auto* xs = static_cast<__nv_bfloat16*>(b.grow(b.xs_, uint64_t(count) * 3 * 2, "the split activations"));
            kernels::split_x(x_dev, count, xs, s);
            a.xs = xs;
        }
        if (a.splits > 1)
            a.part = static_cast<float*>(b.grow(b.part_, uint64_t(a.splits) * uint64_t(n * w.rows) * 4, "partial sums"));
        kernels::mma_matmul(w, a, s);
    }
    CK(cudaGetLastError());
}

void check_weight(const Weight& w) {
    w.check();
    SLUICE_CHECK(supports(w.format), "CUDA backend: weight format ", weight_format_name(w.format),
                 " is not supported on the GPU (", w.rows, "x", w.cols, "); use --device cpu");
}

}  // namespace

bool compiled() { return true; }

bool usable(std::string* why) {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        if (why) *why = std::string("no usable CUDA device: ") + cudaGetErrorString(e);
        return false;
    }
    if (count == 0) {
        if (why) *why = "no CUDA device";
        return false;
    }
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
        if (why) *why = "cannot read the CUDA device's properties";
        return false;
    }
    if (p.major < 9) {
        if (why)
            *why = cat("CUDA device ", p.name, " has compute capability ", p.major, ".", p.minor,
                       "; this build has code for 9.0 (Hopper) and later");
        return false;
    }
    return true;
}

DeviceInfo device_info() {
    std::string why;
    SLUICE_CHECK(usable(&why), why);
    cudaDeviceProp p{};
    CK(cudaGetDeviceProperties(&p, 0));
    size_t free_b = 0, total_b = 0;
    CK(cudaMemGetInfo(&free_b, &total_b));
    return {p.name, p.major, p.minor, p.multiProcessorCount, uint64_t(total_b), uint64_t(free_b)};
}

void set_memory_budget(uint64_t bytes) {
    g_budget_request = bytes;
    std::string why;
    if (bytes && usable(&why)) {
        auto& b = backend();
        std::lock_guard lock(b.mu);
        b.set_budget(bytes);
    }
}

uint64_t memory_budget() {
    auto& b = backend();
    std::lock_guard lock(b.mu);
    return b.budget();
}

bool supports(WeightFormat f) {
    switch (f) {
        case WeightFormat::F32:
        case WeightFormat::F16:
        case WeightFormat::BF16:
        case WeightFormat::FP8_E4M3_B128:
        case WeightFormat::MXFP4:
        case WeightFormat::INT4_G32: return true;
        default: return false;
    }
}

int k_splits(int64_t rows, int64_t cols) {
    // Enough warps to keep every multiprocessor's loads in flight for one-row products, at least two chunks per
    // part, at most 16 parts. A function of the shape only: the same split for every batch size.
    const int64_t warps = (rows + kernels::kWarpRows - 1) / kernels::kWarpRows;
    const int64_t chunks = (cols + kernels::kChunkCols - 1) / kernels::kChunkCols;
    int64_t s = (2048 + warps - 1) / warps;
    s = std::min<int64_t>(s, std::max<int64_t>(1, chunks / 2));
    return int(std::max<int64_t>(1, std::min<int64_t>(s, 16)));
}

void matmul(const Weight& w, const float* x, int64_t n, float* y) {
    check_weight(w);
    SLUICE_CHECK(n >= 0, "matmul: negative row count ", n);
    if (n == 0 || w.rows == 0) return;
    if (w.cols == 0) {
        std::memset(y, 0, size_t(n * w.rows) * 4);
        return;
    }
    auto& b = backend();
    std::lock_guard lock(b.mu);
    const auto t0 = std::chrono::steady_clock::now();
    const uint64_t x_bytes = uint64_t(n * w.cols) * 4, y_bytes = uint64_t(n * w.rows) * 4;
    // Every work buffer first: growing one may evict kept weight copies, so the weight is placed last.
    auto* xd = static_cast<float*>(b.grow(b.x_, x_bytes, "the activations"));
    auto* yd = static_cast<float*>(b.grow(b.y_, y_bytes, "the results"));
    if (uses_mma(w.format, w.cols)) {
        if (!kernels::mma_splits_itself(n)) b.grow(b.xs_, x_bytes / 4 * 6, "the split activations");
        const int splits = k_splits(w.rows, w.cols);
        if (splits > 1) b.grow(b.part_, uint64_t(splits) * y_bytes, "partial sums");
    }
    const kernels::WDesc d = b.place(w);
    auto* h = static_cast<uint8_t*>(b.pinned(std::max(x_bytes, y_bytes)));
    std::memcpy(h, x, x_bytes);
    CK(cudaMemcpyAsync(xd, h, x_bytes, cudaMemcpyHostToDevice, b.stream()));
    run_matmul(b, d, xd, n, yd);
    CK(cudaMemcpyAsync(h, yd, y_bytes, cudaMemcpyDeviceToHost, b.stream()));
    CK(cudaStreamSynchronize(b.stream()));
    std::memcpy(y, h, y_bytes);
    b.stats.calls++;
    b.stats.h2d_bytes += x_bytes;
    b.stats.d2h_bytes += y_bytes;
    b.stats.busy_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

bool pin_host(void* p, uint64_t bytes) {
    backend();
    if (!p || bytes == 0) return false;
    if (cudaHostRegister(p, bytes, cudaHostRegisterDefault) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return true;
}

void unpin_host(void* p) {
    if (p && cudaHostUnregister(p) != cudaSuccess) (void)cudaGetLastError();
}

Stats stats() {
    auto& b = backend();
    std::lock_guard lock(b.mu);
    return b.stats;
}

void reset_stats() {
    auto& b = backend();
    std::lock_guard lock(b.mu);
    const uint64_t resident = b.stats.resident_weight_bytes;
    b.stats = {};
    b.stats.resident_weight_bytes = resident;
}

void* device_alloc(uint64_t bytes) {
    backend();
    void* p = nullptr;
    CK(cudaMalloc(&p, bytes));
    return p;
}
void device_free(void* p) { CK(cudaFree(p)); }
void copy_to_device(void* dst, const void* src, uint64_t bytes) {
    CK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}
void copy_to_host(void* dst, const void* src, uint64_t bytes) {
    CK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}
void synchronize() { CK(cudaStreamSynchronize(backend().stream())); }

void matmul_device(const Weight& w_dev, const float* x_dev, int64_t n, float* y_dev) {
    check_weight(w_dev);
    if (n == 0 || w_dev.rows == 0) return;
    auto& b = backend();
    std::lock_guard lock(b.mu);
    const kernels::WDesc d{int(w_dev.format), w_dev.rows, w_dev.cols, w_dev.data, w_dev.scales};
    run_matmul(b, d, x_dev, n, y_dev);
}

EventPair event_pair() {
    backend();
    cudaEvent_t a, c;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&c));
    return {a, c};
}
void record(void* event) { CK(cudaEventRecord(static_cast<cudaEvent_t>(event), backend().stream())); }
float elapsed_ms(const EventPair& e) {
    CK(cudaEventSynchronize(static_cast<cudaEvent_t>(e.stop)));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(e.start), static_cast<cudaEvent_t>(e.stop)));
    return ms;
}
void destroy(EventPair& e) {
    if (e.start) cudaEventDestroy(static_cast<cudaEvent_t>(e.start));
    if (e.stop) cudaEventDestroy(static_cast<cudaEvent_t>(e.stop));
    e = {};
}
double graph_ms_per_call(const std::function<void()>& body, int reps) {
    auto& b = backend();
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    CK(cudaStreamSynchronize(b.stream()));
    CK(cudaStreamBeginCapture(b.stream(), cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < reps; ++i) body();
    CK(cudaStreamEndCapture(b.stream(), &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaGraphLaunch(exec, b.stream()));  // warm-up
    std::vector<double> ms;
    for (int r = 0; r < 5; ++r) {
        CK(cudaEventRecord(e0, b.stream()));
        CK(cudaGraphLaunch(exec, b.stream()));
        CK(cudaEventRecord(e1, b.stream()));
        CK(cudaEventSynchronize(e1));
        float t = 0;
        CK(cudaEventElapsedTime(&t, e0, e1));
        ms.push_back(double(t) / reps);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

void* host_alloc_pinned(uint64_t bytes) {
    backend();
    void* p = nullptr;
    CK(cudaMallocHost(&p, bytes));
    return p;
}
void host_free_pinned(void* p) { CK(cudaFreeHost(p)); }
void copy_to_device_async(void* dst, const void* src, uint64_t bytes) {
    CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, backend().stream()));
}
void device_copy_async(void* dst, const void* src, uint64_t bytes) {
    CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, backend().stream()));
}

}  // namespace sluice::cuda
