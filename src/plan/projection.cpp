#include "plan/projection.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "io/direct_reader.h"
#include "models/expert_setup.h"
#include "plan/cache_sim.h"
#include "plan/kernel_probe.h"

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
                            double drive_gbps, int64_t rows, int64_t logit_rows, const std::string& timing) {
    PassProjection p;
    p.rows = rows;
    p.hit_rate = hit_rate;
    const double E = double(m.n_experts), k = double(m.top_k), L = double(m.n_moe_layers), R = double(rows);
    const double h = std::clamp(hit_rate, 0.0, 1.0);
    p.distinct_experts = distinct_experts(E, k, R);
    const double experts_used = p.distinct_experts * L;  // per pass, all MoE layers
    p.expert_bytes_read = experts_used * (1.0 - h) * double(m.expert_slot_bytes);
    p.spine_bytes_read = double(plan.spine_streamed_bytes);
    p.io_ms = ms_for(p.expert_bytes_read + p.spine_bytes_read, drive_gbps);
    // a layer's misses are issued together: the first lands after one read's latency, the rest stream behind it
    const double miss_any = 1.0 - std::pow(h, p.distinct_experts);  // chance that a layer misses at all
    p.io_ms += L * miss_any * rates.drive_latency_ms;
    const bool timed = !rates.kernels.empty();
    if (!timed) {
        p.pass_ms = p.io_ms;
        p.tok_per_s = p.pass_ms > 0 ? 1000.0 * R / p.pass_ms : 0.0;
        return p;
    }
    const double overhead_ms = rates.matmul_overhead_us / 1000.0;
    double spine_ms = 0;  // the spine's matrices, the head included: not overlapped with the layer's reads
    for (const auto& [fmt, bytes] : m.spine_matmul_bytes) spine_ms += ms_for(double(bytes), kernel_for(rates, fmt).at(R));
    spine_ms += double(m.spine_matmuls) * overhead_ms;
    if (logit_rows > 0 && m.head_bytes > 0)
        spine_ms += ms_for(double(m.head_bytes), kernel_for(rates, m.head_format).at(double(logit_rows))) + overhead_ms;
    const double rows_per_expert = p.distinct_experts > 0 ? R * k / p.distinct_experts : 1.0;
    // c_e: one expert's compute, each matrix at the rate probed at its shape when the rates have it
    double expert_ms = double(m.expert_matmuls) * overhead_ms;
    double elements = 0;
    for (const auto& [rows_m, cols_m] : m.expert_matrix_shapes) elements += double(rows_m) * double(cols_m);
    bool shaped = elements > 0;
    for (const auto& [rows_m, cols_m] : m.expert_matrix_shapes)
        shaped = shaped && rates.kernels.count(kernel_shape_key(m.expert_format, rows_m, cols_m));
    if (shaped) {
        for (const auto& [rows_m, cols_m] : m.expert_matrix_shapes)
            expert_ms += ms_for(double(m.expert_bytes) * double(rows_m) * double(cols_m) / elements,
                                rates.kernels.at(kernel_shape_key(m.expert_format, rows_m, cols_m)).at(rows_per_expert));
    } else {
        expert_ms += ms_for(double(m.expert_bytes), kernel_for(rates, m.expert_format).at(rows_per_expert));
    }
    p.compute_ms = spine_ms + experts_used * expert_ms;
    if (timing == "overlap") {
        p.pass_ms = std::max(p.io_ms, p.compute_ms);
    } else if (timing == "serial") {
        p.pass_ms = p.io_ms + p.compute_ms;
    } else {  // pipeline (the top of projection.h)
        const double d = p.distinct_experts, miss = d * (1.0 - h);
        const double read_ms = ms_for(double(m.expert_slot_bytes), drive_gbps);           // τ
        const double first_ms = miss_any * std::max(rates.drive_latency_ms, read_ms);     // λ: the first miss lands
        double layer_ms = d * expert_ms;
        if (miss > 0)
            layer_ms = std::max({layer_ms, first_ms + miss * expert_ms,
                                 first_ms + std::max(0.0, miss - 1.0) * read_ms + std::min(1.0, miss) * expert_ms});
        // the drives cannot deliver the pass's bytes faster than their rate
        p.pass_ms = std::max(spine_ms + L * layer_ms, ms_for(p.expert_bytes_read + p.spine_bytes_read, drive_gbps));
    }
    p.tok_per_s = p.pass_ms > 0 ? 1000.0 * R / p.pass_ms : 0.0;
    return p;
}

Projection project(const ModelShape& m, const PlanMachine& machine, const PlanSettings& s) {
    SLUICE_CHECK(!machine.drives_gbps.empty(), "--drives: at least one drive rate is needed (e.g. 7GB/s)");
    for (double g : machine.drives_gbps)
        SLUICE_CHECK(std::isfinite(g) && g > 0, "--drives: every drive rate must be > 0, got ", g, " GB/s");
    SLUICE_CHECK(machine.memory_bytes > 0, "--memory: the budget must be > 0");
    SLUICE_CHECK(s.prefill_chunk > 0, "--prefill-chunk must be > 0");
    SLUICE_CHECK(s.timing == "pipeline" || s.timing == "overlap" || s.timing == "serial", "timing model '", s.timing,
                 "': pipeline, overlap or serial");
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

    // hit rates: the engine's policy over a routing stream at this cache size (plan/cache_sim.h)
    std::vector<double> shares = s.usage_share;
    if (shares.empty() && s.trace) shares = trace_usage_shares(*s.trace, m);
    const std::string routing = !s.usage_share.empty() ? "measured usage counts (--usage-stats)"
                                : s.trace            ? "the trace's usage counts"
                                                     : "uniform routing";
    if (!s.usage_share.empty()) p.popular_share = skewed_hit_rate(s.usage_share, double(p.cache_slots));
    const bool can_simulate = m.n_moe_layers > 0 && m.n_experts > 0 && m.top_k > 0;
    auto hit_at = [&](uint64_t slots, int64_t rows, const std::string& policy) {
        if (!can_simulate) return 1.0;
        if (s.trace && rows == 1) return replay_cache(*s.trace, slots, 1, policy).hit_rate;
        CacheSimOptions o;
        o.policy = policy;
        return simulate_cache(m.n_moe_layers, m.n_experts, m.top_k, shares, slots, rows, o).hit_rate;
    };
    auto hit_for = [&](int64_t rows) { return hit_at(p.cache_slots, rows, s.cache_policy); };
    p.hit_model = s.cache_policy + " cache simulated at " + std::to_string(p.cache_slots) + " slots over " +
                  (s.trace ? "the recorded trace (decode) and " : "") + routing;
    p.hit_rate = hit_for(1);
    for (double g : machine.drives_gbps) p.drive_gbps += g;
    SLUICE_CHECK(machine.gpu_memory_bytes == 0 || machine.device == "cuda", "--gpu-memory needs --device cuda");
    SLUICE_CHECK(machine.gpu_memory_bytes > 0 || machine.link_gbps == 0, "--link needs --gpu-memory");
    SLUICE_CHECK(machine.gpu_memory_bytes == 0 || machine.link_gbps != 0,
                 "--gpu-memory needs --link: the host-to-device copy rate (e.g. 25GB/s)");
    if (machine.gpu_memory_bytes > 0) p.card = plan_card(m, p.plan, machine.gpu_memory_bytes, machine.link_gbps);
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
    SLUICE_CHECK(std::isfinite(s.token_overhead_ms) && s.token_overhead_ms >= 0,
                 "--token-overhead-ms must be >= 0, got ", s.token_overhead_ms);
    auto pass = [&](int64_t rows, int64_t logit_rows, double hit) {
        PassProjection q = project_pass(m, p.plan, rates, hit, p.drive_gbps, rows, logit_rows, s.timing);
        if (p.timed && s.token_overhead_ms > 0) {  // serial work around the matmuls: it overlaps no read
            const double extra_ms = double(rows) * s.token_overhead_ms;
            q.compute_ms += extra_ms;
            q.pass_ms += extra_ms;
            q.tok_per_s = 1000.0 * double(rows) / q.pass_ms;
        }
        if (p.card) {  // the link is a resource of its own: a pass takes at least its copies' time
            q.card_hit_rate = hit_at(p.card->expert_slots, rows, "lru");
            q.link_bytes = card_link_bytes(m, *p.card, q.distinct_experts * double(m.n_moe_layers), q.card_hit_rate);
            q.link_ms = ms_for(q.link_bytes, p.card->link_gbps);
            q.pass_ms = std::max(q.pass_ms, q.link_ms);
            q.tok_per_s = q.pass_ms > 0 ? 1000.0 * double(rows) / q.pass_ms : 0.0;
        }
        return q;
    };
    p.decode = pass(1, 1, p.hit_rate);
    p.prefill = pass(s.prefill_chunk, 1, hit_for(s.prefill_chunk));
    for (int64_t b : s.batch_sizes) p.batches.push_back(pass(b, b, b == 1 ? p.hit_rate : hit_for(b)));
    return p;
}

std::vector<double> trace_usage_shares(const ExpertTrace& t, const ModelShape& m) {
    std::map<uint16_t, std::vector<double>> by_layer;
    for (const TraceRecord& r : t.records) {
        auto& row = by_layer[r.layer];
        row.resize(size_t(m.n_experts), 0.0);
        for (uint16_t e : r.choices)
            if (e < row.size()) row[e] += 1;
    }
    SLUICE_CHECK(int64_t(by_layer.size()) == m.n_moe_layers, "the trace routes ", by_layer.size(),
                 " MoE layers, the model has ", m.n_moe_layers);
    std::vector<double> shares;
    for (auto& [layer, row] : by_layer) shares.insert(shares.end(), row.begin(), row.end());
    return shares;
}

void check_trace_shape(const ExpertTrace& t, const std::string& path, const ModelShape& m) {
    SLUICE_CHECK(int64_t(t.header.n_experts) == m.n_experts, "--trace ", path, ": recorded on a model with ",
                 t.header.n_experts, " experts per layer; this one has ", m.n_experts);
    SLUICE_CHECK(int64_t(t.header.n_layers) == m.n_layers, "--trace ", path, ": recorded on a model with ",
                 t.header.n_layers, " layers; this one has ", m.n_layers);
    bool decode = false;
    for (const TraceRecord& r : t.records) decode |= r.n_rows == 1;
    SLUICE_CHECK(decode, "--trace ", path, ": no decode pass (one row) to replay");
}

double parse_drive_rate(const std::string& text, const std::string& flag) {
    std::string t;
    for (char c : text)
        if (c != ' ') t += c;
    size_t used = 0;
    double v = 0;
    try {
        v = std::stod(t, &used);
    } catch (...) {
        fail(flag, ": '", text, "' is not a rate (use e.g. 7GB/s, 3500MB/s)");
    }
    std::string unit = t.substr(used);
    for (auto& c : unit) c = char(std::tolower(static_cast<unsigned char>(c)));
    double mul = 0;
    if (unit.empty() || unit == "gb/s" || unit == "g" || unit == "gbps" || unit == "g/s") mul = 1;
    else if (unit == "mb/s" || unit == "m" || unit == "mbps" || unit == "m/s") mul = 1e-3;
    else if (unit == "tb/s") mul = 1e3;
    else fail(flag, ": '", text, "' has an unknown unit '", t.substr(used), "' (GB/s or MB/s)");
    SLUICE_CHECK(std::isfinite(v) && v > 0, flag, ": '", text, "': ", flag == "--drives" ? "a drive rate" : "a rate",
                 " must be > 0");
    return v * mul;
}

}  // namespace sluice
