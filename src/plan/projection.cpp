#include "plan/projection.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "io/direct_reader.h"
#include "models/expert_setup.h"

namespace sluice {

double distinct_experts(double E, double k, double rows) {
    if (E <= 0) return 0;
    return E * (1.0 - std::pow(1.0 - std::min(1.0, k / E), rows));
}

double skewed_hit_rate(std::vector<double> shares, double slots) {
    double total = 0;
    for (double s : shares) total += s;
    if (total <= 0 || shares.empty()) return 0;
    std::sort(shares.begin(), shares.end(), std::greater<>());
    double held = 0;
    const size_t n = size_t(std::clamp(slots, 0.0, double(shares.size())));
    for (size_t i = 0; i < n; ++i) held += shares[i];
    return held / total;
}

namespace {
const KernelRate& kernel_for(const MachineRates& r, const std::string& fmt) {
    auto it = r.kernels.find(fmt);
    SLUICE_CHECK(it != r.kernels.end(), "the rates file has no kernel rate for ", fmt,
                 " weights (sluice bench --save-rates measures every CPU format)");
    return it->second;
}
double ms_for(double bytes, double gbps) { return gbps > 0 ? bytes / (gbps * 1e6) : 0.0; }
}  // namespace

PassProjection project_pass(const ModelShape& m, const ResidencyPlan& plan, const MachineRates& rates, double hit_rate,
                            double drive_gbps, int64_t rows, int64_t logit_rows, bool overlap) {
    PassProjection p;
    p.rows = rows;
    const double E = double(m.n_experts), k = double(m.top_k), L = double(m.n_moe_layers), R = double(rows);
    p.distinct_experts = distinct_experts(E, k, R);
    const double experts_used = p.distinct_experts * L;  // per pass, all MoE layers
    p.expert_bytes_read = experts_used * (1.0 - hit_rate) * double(m.expert_slot_bytes);
    p.spine_bytes_read = double(plan.spine_streamed_bytes);
    p.io_ms = ms_for(p.expert_bytes_read + p.spine_bytes_read, drive_gbps);
    // a layer's misses are issued together: the first lands after one read's latency, the rest stream behind it
    const double layers_missing = L * (1.0 - std::pow(std::clamp(hit_rate, 0.0, 1.0), p.distinct_experts));
    p.io_ms += layers_missing * rates.drive_latency_ms;
    const bool timed = !rates.kernels.empty();
    if (timed) {
        double c = 0, calls = 0;
        for (const auto& [fmt, bytes] : m.spine_matmul_bytes) c += ms_for(double(bytes), kernel_for(rates, fmt).at(R));
        calls += double(m.spine_matmuls);
        if (logit_rows > 0 && m.head_bytes > 0) {
            c += ms_for(double(m.head_bytes), kernel_for(rates, m.head_format).at(double(logit_rows)));
            calls += 1;
        }
        const double rows_per_expert = p.distinct_experts > 0 ? R * k / p.distinct_experts : 1.0;
        c += ms_for(experts_used * double(m.expert_bytes), kernel_for(rates, m.expert_format).at(rows_per_expert));
        calls += experts_used * double(m.expert_matmuls);
        c += calls * rates.matmul_overhead_us / 1000.0;
        p.compute_ms = c;
    }
    p.pass_ms = overlap ? std::max(p.io_ms, p.compute_ms) : p.io_ms + p.compute_ms;
    p.tok_per_s = p.pass_ms > 0 ? 1000.0 * R / p.pass_ms : 0.0;
    return p;
}

Projection project(const ModelShape& m, const PlanMachine& machine, const PlanSettings& s) {
    SLUICE_CHECK(!machine.drives_gbps.empty(), "--drives: at least one drive rate is needed (e.g. 7GB/s)");
    for (double g : machine.drives_gbps)
        SLUICE_CHECK(std::isfinite(g) && g > 0, "--drives: every drive rate must be > 0, got ", g, " GB/s");
    SLUICE_CHECK(machine.memory_bytes > 0, "--memory: the budget must be > 0");
    SLUICE_CHECK(s.prefill_chunk > 0, "--prefill-chunk must be > 0");
    Projection p;
    int64_t pass_rows = s.pass_rows > 0 ? s.pass_rows : s.prefill_chunk;
    if (s.pass_rows <= 0)
        for (int64_t b : s.batch_sizes) pass_rows = std::max(pass_rows, b);
    const PlanInputs in = plan_inputs(m, s.ctx, s.parallel, s.staging_experts, pass_rows);
    p.plan = plan_residency_for_rows(machine.memory_bytes, m.spine_fixed_bytes, m.layer_read_bytes,
                                     in.state_bytes - in.activation_bytes, m.activation_bytes, pass_rows,
                                     in.staging_bytes);
    const uint64_t n_all = uint64_t(m.n_moe_layers * m.n_experts);
    const uint64_t cache_bytes = std::min(p.plan.expert_cache_bytes, n_all * m.expert_slot_bytes);
    p.cache_slots = m.expert_slot_bytes ? cache_bytes / m.expert_slot_bytes : 0;
    p.cache_share = n_all ? std::min(1.0, double(p.cache_slots) / double(n_all)) : 1.0;
    if (!s.usage_share.empty()) {
        p.hit_rate = skewed_hit_rate(s.usage_share, double(p.cache_slots));
        p.hit_model = "usage counts (--usage-stats): hit rate = routing share of the " + std::to_string(p.cache_slots) +
                      " most-used experts (the cache keeps the popular ones; an upper bound for LRU)";
    } else {
        p.hit_rate = p.cache_share;
        p.hit_model = "uniform routing: hit rate = cache share (cached experts / all routed experts)";
    }
    for (double g : machine.drives_gbps) p.drive_gbps += g;
    MachineRates rates;
    if (!machine.rates) {
        p.untimed_reason = machine.device == "cuda"
                               ? "no CUDA kernel rates are measured yet (no --rates file; sluice bench --save-rates on a "
                                 "CUDA machine writes them); only bytes and the drive-bound ceiling are projected"
                               : "no --rates file: only bytes and the drive-bound ceiling are projected (sluice bench "
                                 "--save-rates FILE measures the kernels)";
    } else if (machine.rates->device != machine.device) {
        SLUICE_CHECK(machine.device == "cuda", "--rates: the file's kernel rates are for ", machine.rates->device,
                     ", not ", machine.device, " (--device)");
        p.untimed_reason = "no CUDA kernel rates are measured yet: the --rates file holds " + machine.rates->device +
                           " rates (sluice bench --save-rates on a CUDA machine measures them); only bytes and the "
                           "drive-bound ceiling are projected";
    } else {
        rates = *machine.rates;
        // kernels were measured with rates.threads threads; assume they scale linearly to --threads
        if (machine.device == "cpu" && machine.threads > 0 && rates.threads > 0 && machine.threads != rates.threads)
            for (auto& [fmt, k] : rates.kernels)
                for (double& g : k.gbps) g *= double(machine.threads) / double(rates.threads);
        p.timed = !rates.kernels.empty();
        if (!p.timed) p.untimed_reason = "the --rates file has no kernel rates";
    }
    p.decode = project_pass(m, p.plan, rates, p.hit_rate, p.drive_gbps, 1, 1, s.overlap);
    p.prefill = project_pass(m, p.plan, rates, p.hit_rate, p.drive_gbps, s.prefill_chunk, 1, s.overlap);
    for (int64_t b : s.batch_sizes) p.batches.push_back(project_pass(m, p.plan, rates, p.hit_rate, p.drive_gbps, b, b, s.overlap));
    return p;
}

double parse_drive_rate(const std::string& text) {
    std::string t;
    for (char c : text)
        if (c != ' ') t += c;
    size_t used = 0;
    double v = 0;
    try {
        v = std::stod(t, &used);
    } catch (...) {
        fail("--drives: '", text, "' is not a rate (use e.g. 7GB/s, 3500MB/s)");
    }
    std::string unit = t.substr(used);
    for (auto& c : unit) c = char(std::tolower(static_cast<unsigned char>(c)));
    double mul = 0;
    if (unit.empty() || unit == "gb/s" || unit == "g" || unit == "gbps" || unit == "g/s") mul = 1;
    else if (unit == "mb/s" || unit == "m" || unit == "mbps" || unit == "m/s") mul = 1e-3;
    else if (unit == "tb/s") mul = 1e3;
    else fail("--drives: '", text, "' has an unknown unit '", t.substr(used), "' (GB/s or MB/s)");
    SLUICE_CHECK(std::isfinite(v) && v > 0, "--drives: '", text, "': a drive rate must be > 0");
    return v * mul;
}

}  // namespace sluice
