// The CUDA backend's entry points in a build without nvcc (SLUICE_CUDA off): nothing is usable, and every call
// that needs a device says why.
#include "core/error.h"
#include "ops/cuda/backend.h"

namespace sluice::cuda {

namespace {
[[noreturn]] void off() { fail("this sluice was built without CUDA (configure with nvcc on the PATH, -DSLUICE_CUDA=ON)"); }
}  // namespace

bool compiled() { return false; }
bool usable(std::string* why) {
    if (why) *why = "this sluice was built without CUDA";
    return false;
}
DeviceInfo device_info() { off(); }
void set_memory_budget(uint64_t) {}
uint64_t memory_budget() { return 0; }
bool supports(WeightFormat) { return false; }
void matmul(const Weight&, const float*, int64_t, float*) { off(); }
void expert_group(const GroupActivation&, const GroupMember*, int64_t, const float*, int64_t, int64_t, float*,
                  ThreadPool*) { off(); }
bool attention_supports(const AttentionShape&, const Rows&, const Rows&) { return false; }
void attention(const AttentionShape&, const float*, int64_t, const int64_t*, const Rows&, const Rows&, float*) { off(); }
bool kda_supports(int64_t) { return false; }
void kda_recurrent(const float*, const float*, const float*, const float*, int64_t, const float*, float*, int64_t,
                   int64_t, int64_t, int64_t, int64_t, float*) { off(); }
bool pin_host(void*, uint64_t) { return false; }
void unpin_host(void*) {}
Stats stats() { return {}; }
void reset_stats() {}
void* device_alloc(uint64_t) { off(); }
void device_free(void*) {}
void copy_to_device(void*, const void*, uint64_t) { off(); }
void copy_to_host(void*, const void*, uint64_t) { off(); }
void synchronize() {}
void matmul_device(const Weight&, const float*, int64_t, float*) { off(); }
int k_splits(int64_t, int64_t) { return 1; }
double measure_read_gbps(uint64_t) { off(); }
EventPair event_pair() { off(); }
void record(void*) { off(); }
float elapsed_ms(const EventPair&) { off(); }
void destroy(EventPair&) {}
double graph_ms_per_call(const std::function<void()>&, int) { off(); }
void* host_alloc_pinned(uint64_t) { off(); }
void host_free_pinned(void*) {}
void copy_to_device_async(void*, const void*, uint64_t) { off(); }
void device_copy_async(void*, const void*, uint64_t) { off(); }

}  // namespace sluice::cuda
