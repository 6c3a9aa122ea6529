#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/host_pinning.h"
#include "ops/cuda/backend.h"
#include "ops/ops.h"

namespace sluice::ops {

namespace {
Backend g_backend = Backend::Cpu;
bool g_read_env = false;

// Buffers that ask core/host_pinning to page-lock them get it when the CUDA backend is selected.
[[maybe_unused]] const bool g_pinning_installed = (host_pinning::install({[](void* p, uint64_t bytes) {
                                                             return backend() == Backend::Cuda && cuda::pin_host(p, bytes);
                                                         },
                                                         [](void* p) { cuda::unpin_host(p); }}),
                                  true);

Backend resolve(std::string_view name, const char* what) {
    if (name == "cpu") return Backend::Cpu;
    std::string why;
    const bool cuda_ok = cuda::usable(&why);
    if (name == "cuda") {
        SLUICE_CHECK(cuda_ok, what, " cuda: ", why);
        return Backend::Cuda;
    }
    if (name == "auto") return cuda_ok ? Backend::Cuda : Backend::Cpu;
    fail(what, ": unknown device '", name, "' (auto, cuda, cpu)");
}
}  // namespace

std::string_view backend_name(Backend b) { return b == Backend::Cuda ? "cuda" : "cpu"; }

Backend backend() {
    if (!g_read_env) {
        g_read_env = true;
        if (const char* env = std::getenv("SLUICE_DEVICE"); env && *env) g_backend = resolve(env, "SLUICE_DEVICE");
    }
    return g_backend;
}

Backend select_backend(std::string_view name) {
    g_read_env = true;
    g_backend = resolve(name, "--device");
    return g_backend;
}

Backend check_usable(Backend b, std::string_view what) {
    if (b != Backend::Cuda) return b;
    std::string why;
    SLUICE_CHECK(cuda::usable(&why), what, ": ", why);
    return b;
}

void set_backend(Backend b) {
    g_read_env = true;
    check_usable(b, "CUDA backend");
    g_backend = b;
}

PinnedRegion::PinnedRegion(void* p, uint64_t bytes) {
    if (backend() == Backend::Cuda && cuda::pin_host(p, bytes)) p_ = p;
}

void PinnedRegion::reset() {
    if (p_) cuda::unpin_host(p_);
    p_ = nullptr;
}

}  // namespace sluice::ops
