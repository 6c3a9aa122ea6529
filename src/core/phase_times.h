// Wall time of a forward pass's blocks (and the weight matmuls' flops, below), summed over calls since the process
// started (`bench` prints the prefill's and the decode's share): where a pass spends time that the GPU timeline and the read counters do not show, e.g.
// the host work around each op. Each block's entry point holds a Scope; a scope inside another (the KDA delta rule
// inside the KDA block) is counted in both. Relaxed atomics: cheap, and exact once the pass has returned.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>

namespace sluice::phase_times {

// kMatmul: the weight matmuls (ops::matmul, either backend) and the CPU's expert groups (ops::expert_group: gather,
// gate, up, activation, down, scatter), inside the blocks above. `bench` takes it and the reads' wait out of a decoded
// token's time: the rest (norms, attention, routing, sampling, the engine's own work) is what `sluice plan` does not
// model from kernel rates (`plan --token-overhead-ms`).
enum Phase : int { kMla, kGqa, kKda, kKdaDeltaRule, kRoute, kMoe, kAttnRes, kMatmul, kCount };
const char* name(Phase p);

void add(Phase p, double ms);
std::array<double, kCount> snapshot_ms();

// Floating-point operations of the weight matmuls (2 * n * rows * cols per ops::matmul call, either backend) since
// the process started: `bench` sets the prefill's against the FMA peak. Attention, KDA and element-wise ops are not
// counted.
void add_matmul_flops(double flops);
double matmul_flops();

class Scope {
public:
    explicit Scope(Phase p) : p_(p), start_(std::chrono::steady_clock::now()) {}
    ~Scope() { add(p_, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count()); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

private:
    Phase p_;
    std::chrono::steady_clock::time_point start_;
};

}  // namespace sluice::phase_times
