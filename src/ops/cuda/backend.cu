// The CUDA backend's host side: the device, its stream, the workspace, and the device copies of stable weights.
#include "ops/cuda/backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/stable_memory.h"
#include "ops/cuda/backend_state.cuh"
#include "ops/cuda/matmul_kernels.cuh"

namespace sluice::cuda {

using namespace detail;

namespace {
uint64_t g_budget_request = 0;
}  // namespace

namespace detail {
Backend& backend() {
    static Backend* b = [] {
        auto* p = new Backend();
        if (g_budget_request) p->set_budget(g_budget_request);
        return p;
    }();
    return *b;
}
}  // namespace detail

namespace {

void run_matmul(Backend& b, const kernels::WDesc& w, const float* x_dev, int64_t n, float* y_dev) {
    const cudaStream_t s = b.stream();
    if (!uses_mma(WeightFormat(w.format), w.cols)) {
        kernels::ffma_matmul(w, x_dev, n, y_dev, s);
    } else {
        const bool nibble = kernels::nibble_pairs(w.format);
        kernels::MmaArgs a{nullptr, x_dev, n, y_dev, k_splits(w.rows, w.cols), nullptr};
        if (!kernels::mma_splits_itself(n)) {
            const int64_t count = n * w.cols;
            auto* xs = static_cast<__nv_bfloat16*>(b.grow(b.xs_, uint64_t(count) * 3 * 2, "the split activations"));
            kernels::split_x(x_dev, count, xs, count, nibble, s);
            a.xs = xs;
        }
        if (a.splits > 1)
            a.part = static_cast<float*>(b.grow(b.part_, uint64_t(a.splits) * uint64_t(n * w.rows) * 4, "partial sums"));
        kernels::mma_matmul(w, a, s);
    }
    CK(cudaGetLastError());
}

}  // namespace

namespace detail {
void check_weight(const Weight& w) {
    w.check();
    SLUICE_CHECK(supports(w.format), "CUDA backend: weight format ", weight_format_name(w.format),
                 " is not supported on the GPU (", w.rows, "x", w.cols, "); use --device cpu");
}
}  // namespace detail

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
    cudaEvent_t* ev = b.call_events();  // where the call's device time goes (Stats: place, copies, kernels)
    CK(cudaEventRecord(ev[0], b.stream()));
    const kernels::WDesc d = b.place(w);
    CK(cudaEventRecord(ev[1], b.stream()));
    // Page-locked activations (the scratch arena under --device cuda) go straight across; others through staging.
    const bool x_direct = b.is_pinned(x, x_bytes), y_direct = b.is_pinned(y, y_bytes);
    auto* h = x_direct && y_direct ? nullptr : static_cast<uint8_t*>(b.pinned(std::max(x_bytes, y_bytes)));
    if (!x_direct) std::memcpy(h, x, x_bytes);
    CK(cudaMemcpyAsync(xd, x_direct ? static_cast<const void*>(x) : h, x_bytes, cudaMemcpyHostToDevice, b.stream()));
    CK(cudaEventRecord(ev[2], b.stream()));
    run_matmul(b, d, xd, n, yd);
    CK(cudaEventRecord(ev[3], b.stream()));
    CK(cudaMemcpyAsync(y_direct ? static_cast<void*>(y) : h, yd, y_bytes, cudaMemcpyDeviceToHost, b.stream()));
    CK(cudaEventRecord(ev[4], b.stream()));
    CK(cudaStreamSynchronize(b.stream()));
    float ms[4] = {};
    for (int i = 0; i < 4; ++i) CK(cudaEventElapsedTime(&ms[i], ev[i], ev[i + 1]));
    b.stats.place_ms += ms[0];
    b.stats.activation_copy_ms += ms[1] + ms[3];
    b.stats.kernel_ms += ms[2];
    if (!y_direct) std::memcpy(y, h, y_bytes);
    b.stats.calls++;
    b.stats.h2d_bytes += x_bytes;
    b.stats.d2h_bytes += y_bytes;
    b.stats.busy_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

bool pin_host(void* p, uint64_t bytes) {
    auto& b = backend();
    if (!p || bytes == 0) return false;
    if (cudaHostRegister(p, bytes, cudaHostRegisterDefault) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    std::lock_guard lock(b.mu);
    b.pinned_ranges[reinterpret_cast<uintptr_t>(p)] = bytes;
    return true;
}

void unpin_host(void* p) {
    if (!p) return;
    auto& b = backend();
    {
        std::lock_guard lock(b.mu);
        b.pinned_ranges.erase(reinterpret_cast<uintptr_t>(p));
    }
    if (cudaHostUnregister(p) != cudaSuccess) (void)cudaGetLastError();
}

Stats stats() {
    auto& b = backend();
    std::lock_guard lock(b.mu);
    Stats s = b.stats;
    s.workspace_bytes = b.workspace_bytes();
    return s;
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
