// The card's own read rate, the ceiling for one-row (memory-bound) matmuls: every thread streams 16-byte loads over a
// buffer several times the L2 and folds them into one word, so nothing but the reads costs anything.
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "ops/cuda/backend.h"

namespace sluice::cuda {

namespace {
__global__ void read_kernel(const uint4* __restrict__ p, int64_t count, unsigned* __restrict__ sink) {
    unsigned acc = 0;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
        const uint4 v = __ldcs(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9E3779B9u) sink[0] = acc;  // never true for the data below; keeps the loads
}
}  // namespace

double measure_read_gbps(uint64_t bytes) {
    bytes = bytes / 16 * 16;
    void* buf = device_alloc(bytes);
    void* sink = device_alloc(16);
    auto check = [](cudaError_t e, const char* what) {
        if (e != cudaSuccess) fail("CUDA read probe: ", what, ": ", cudaGetErrorString(e));
    };
    check(cudaMemset(buf, 0x5A, bytes), "memset");
    int sms = 0;
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "multiprocessor count");
    cudaStream_t s = nullptr;
    cudaEvent_t a = nullptr, b = nullptr;
    check(cudaStreamCreate(&s), "stream");
    check(cudaEventCreate(&a), "event");
    check(cudaEventCreate(&b), "event");
    std::vector<double> gbps;
    for (int i = 0; i < 6; ++i) {
        check(cudaEventRecord(a, s), "record");
        read_kernel<<<unsigned(sms * 8), 512, 0, s>>>(static_cast<const uint4*>(buf), int64_t(bytes / 16),
                                                       static_cast<unsigned*>(sink));
        check(cudaGetLastError(), "launch");
        check(cudaEventRecord(b, s), "record");
        check(cudaEventSynchronize(b), "synchronize");
        float ms = 0;
        check(cudaEventElapsedTime(&ms, a, b), "elapsed time");
        if (i > 0) gbps.push_back(double(bytes) / (double(ms) * 1e6));
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaStreamDestroy(s);
    device_free(buf);
    device_free(sink);
    std::sort(gbps.begin(), gbps.end());
    return gbps[gbps.size() / 2];
}

}  // namespace sluice::cuda
