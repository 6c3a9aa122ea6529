#include "models/expert_setup.h"

#include <algorithm>

#include "core/error.h"
#include "experts/expert_cache.h"
#include "experts/packed_store.h"
#include "experts/usage_stats.h"

namespace sluice {

namespace {
// Resident layers the warmer keeps asked for ahead of the running one: one covers a prefill chunk (a K3 layer's
// 1.6 GB read in ~1.3 s at 1.2 GB/s against seconds of compute at 512 rows); two keep the drive busy in decode.
constexpr int64_t kSpineWarmLayers = 2;
}  // namespace

ResidencyPlan plan_residency_for_rows(uint64_t budget, uint64_t fixed, std::span<const uint64_t> layer_bytes,
                                      uint64_t state_bytes, const std::function<uint64_t(int64_t)>& activation_bytes,
                                      int64_t rows, uint64_t staging, int64_t force_first) {
    const uint64_t activations = activation_bytes(rows);
    try {
        ResidencyPlan p = plan_residency(budget, fixed, layer_bytes, state_bytes + activations, staging, force_first);
        p.activation_bytes = activations;
        return p;
    } catch (const Error& e) {
        // Would a smaller pass fit? Then say which: the activations grow with the rows, nothing else does.
        auto fits = [&](int64_t r) {
            try {
                plan_residency(budget, fixed, layer_bytes, state_bytes + activation_bytes(r), staging, force_first);
                return true;
            } catch (const Error&) {
                return false;
            }
        };
        if (rows <= 1 || !fits(1)) throw;
        int64_t lo = 1, hi = rows;  // fits(lo), !fits(hi)
        while (hi - lo > 1) {
            const int64_t mid = lo + (hi - lo) / 2;
            (fits(mid) ? lo : hi) = mid;
        }
        fail(e.what(), "; of that, the activations of a pass of ", rows, " rows take ", format_bytes(activations),
             ": the largest pass that fits this budget is ", lo, " rows (--chunk / --batch-rows)");
    }
}

ExpertSetup setup_experts(const Checkpoint& ck, std::vector<std::vector<ExpertWeights>> experts, const LoadOptions& opt,
                          uint64_t spine_bytes, uint64_t state_bytes,
                          const std::function<uint64_t(int64_t rows)>& activation_bytes, SpineLayers spine_layers) {
    ExpertSetup s;
    for (const auto& bank : experts)
        if (!bank.empty()) {
            s.expert_bytes = bank[0].size_bytes();
            break;
        }
    const bool packed = !opt.streaming.experts_dirs.empty();
    SLUICE_CHECK(!packed || s.expert_bytes > 0, ck.dir(), ": the model has no routed experts to read from --experts-dir");
    StreamingOptions so = opt.streaming;
    // The resident layers' matrices as file extents, for the warmer (every layer, until a plan streams some).
    std::vector<std::vector<SpineExtent>> warm(spine_layers.size());
    for (size_t l = 0; l < spine_layers.size(); ++l) warm[l] = spine_layer_reads(ck, spine_layers[l]).regions;
    if (opt.memory_budget_bytes > 0) {
        // beside the per-sequence state: the cache policy's own bookkeeping; the scratch arena of the largest pass
        // (its activations) is reserved by plan_residency_for_rows
        int64_t moe_layers = 0, n_experts = 0;
        for (const auto& bank : experts)
            if (!bank.empty()) ++moe_layers, n_experts = std::max<int64_t>(n_experts, int64_t(bank.size()));
        const uint64_t state = state_bytes + opt.prefix_cache_bytes + cache_policy_bytes(so.policy, moe_layers, n_experts);
        const uint64_t staging =
            s.expert_bytes ? uint64_t(std::max<int64_t>(1, so.staging_experts)) * (s.expert_bytes + 6 * 8192) : 0;
        auto spine = std::make_unique<SpineStreamer>(ck, std::move(spine_layers));
        const uint64_t fixed = spine_bytes - std::min(spine_bytes, spine->weight_bytes_total());
        s.plan = plan_residency_for_rows(opt.memory_budget_bytes, fixed, spine->layer_bytes(), state, activation_bytes,
                                         opt.max_pass_rows, staging, opt.spine_stream_from);
        s.plan->prefix_cache_bytes = opt.prefix_cache_bytes;
        so.cache_bytes = s.plan->expert_cache_bytes;
        if (s.plan->streams_spine()) {
            for (size_t l = size_t(s.plan->first_streamed_layer); l < warm.size(); ++l) warm[l].clear();
            spine->start(s.plan->first_streamed_layer, so.reader);
            s.spine = std::move(spine);
        }
    }
    const bool any_warm = std::any_of(warm.begin(), warm.end(), [](const auto& w) { return !w.empty(); });
    if (so.prefetch && any_warm) {
        std::vector<std::string> paths;
        for (const auto& f : ck.files()) paths.push_back(f->path());
        s.warmer = std::make_unique<SpineWarmer>(std::move(paths), std::move(warm), kSpineWarmLayers);
    }
    if ((!opt.stream_experts && opt.memory_budget_bytes == 0 && !packed) || s.expert_bytes == 0) {
        SLUICE_CHECK(so.trace_path.empty(), ck.dir(), s.expert_bytes == 0 ? ": the model has no routed experts to trace"
                     : ": --trace-experts records cache hits and read-aheads of streamed experts: give --memory "
                       "SIZE or --stream");
        s.source = std::make_unique<ResidentExpertSource>(std::move(experts));
        return s;
    }
    if (!so.usage_stats_path.empty() || !so.trace_path.empty()) so.fingerprint = model_fingerprint(ck, 0, 0, s.expert_bytes);
    // One read path: the locations come from the packed store's manifest or from the checkpoint itself.
    ExpertLayout layout = packed ? bind_packed_store(open_packed_store(so.experts_dirs), ck, experts)
                                 : locate_in_checkpoint(ck, experts);
    auto streaming = std::make_unique<StreamingExpertSource>(std::move(layout), so);
    s.streaming = streaming.get();
    s.source = std::move(streaming);
    return s;
}

}  // namespace sluice
