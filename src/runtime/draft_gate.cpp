#include "runtime/draft_gate.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "models/model.h"

namespace sluice {

namespace {
constexpr double kForget = 0.95;  // each verify's weight relative to the next one's
// What probing may cost while the gate is off: a probe's extra bytes (over a plain pass) at most this share of the
// bytes of the plain passes between two probes.
constexpr double kProbeShare = 0.02;
}

double DraftCost::pass_bytes(int64_t rows) const {
    double experts = 0;
    if (n_experts > 0 && top_k > 0) {
        const double miss = 1.0 - double(top_k) / double(n_experts);
        experts = double(n_moe_layers) * expert_bytes * double(n_experts) * (1.0 - std::pow(miss, double(rows)));
    }
    return spine_bytes + experts + draft_bytes_per_token * double(rows - 1);
}

namespace {
bool experts_stream(const Model& m) {
    const ResidencyPlan* plan = m.residency();
    return plan && double(plan->expert_cache_bytes) < double(m.info().routed_expert_bytes_total);
}
// every byte of the spine, with the streamed layers' at 1 and the resident rest at ram_weight
double spine_cost(const Model& m, double ram_weight) {
    const ResidencyPlan* plan = m.residency();
    const double spine = double(m.info().spine_bytes);
    const double streamed = plan ? std::min(spine, double(plan->spine_streamed_bytes)) : 0.0;
    return streamed + ram_weight * (spine - streamed);
}
}  // namespace

double ram_byte_weight(const Model& target) { return experts_stream(target) ? kRamByteWeight : 1.0; }

DraftCost draft_cost(const Model& target, double draft_bytes_per_token) {
    const ModelInfo& info = target.info();
    DraftCost c{spine_cost(target, ram_byte_weight(target)), double(info.expert_bytes), info.n_moe_layers,
                info.n_routed_experts, info.num_experts_per_tok, draft_bytes_per_token};
    if (c.pass_bytes(1) <= 0) c.spine_bytes = 1;  // a model that reports no bytes: drafts cost nothing
    return c;
}

double draft_pass_bytes(const Model& draft, double ram_weight) {
    const ModelInfo& info = draft.info();
    const double experts = double(info.n_moe_layers) * double(info.num_experts_per_tok) * double(info.expert_bytes);
    return spine_cost(draft, ram_weight) + (experts_stream(draft) ? 1.0 : ram_weight) * experts;
}

int64_t confidence_cut(const DraftCost& cost, std::span<const float> confidence) {
    const double plain = cost.pass_bytes(1);
    SLUICE_CHECK(plain > 0, "confidence cut: a pass must read something");
    int64_t best = 0;
    double best_rate = 1.0 / plain, tokens = 1.0, survive = 1.0;
    for (size_t i = 0; i < confidence.size(); ++i) {
        const double c = double(confidence[i]);
        survive *= std::isfinite(c) ? std::clamp(c, 0.0, 1.0) : 0.0;  // a NaN confidence counts as a sure rejection
        tokens += survive;
        const double rate = tokens / cost.pass_bytes(int64_t(i) + 2);
        if (rate > best_rate) best = int64_t(i) + 1, best_rate = rate;
    }
    return best;
}

DraftGate::DraftGate(DraftCost cost, int64_t max_drafts, double min_gain, int64_t probe_after)
    : cost_(cost), max_drafts_(max_drafts), min_gain_(min_gain), probe_after_(probe_after),
      next_probe_after_(probe_after) {
    SLUICE_CHECK(max_drafts >= 0 && min_gain > 0 && probe_after > 0, "draft gate: bad parameters");
    SLUICE_CHECK(cost.pass_bytes(1) > 0, "draft gate: a pass must read something");
    const int64_t k = probe_length();
    const double extra = max_drafts_ > 0 ? cost_.pass_bytes(k + 1) / cost_.pass_bytes(1) - 1.0 : 0.0;
    min_wait_ = int64_t(std::min(1024.0, std::ceil(extra / kProbeShare)));
}

int64_t DraftGate::probe_length() const { return std::max<int64_t>(1, std::min(max_drafts_, best_at(0.5))); }

double DraftGate::optimistic_acceptance() const { return (successes_ + 1.0) / (successes_ + failures_ + 1.0); }

double DraftGate::acceptance() const { return successes_ / (successes_ + failures_); }

double DraftGate::gain_at(int64_t k, double a) const {
    const double tokens = a >= 1.0 ? double(k + 1) : (1.0 - std::pow(a, double(k + 1))) / (1.0 - a);
    return tokens / (cost_.pass_bytes(k + 1) / cost_.pass_bytes(1));
}

double DraftGate::gain(int64_t k) const { return gain_at(k, acceptance()); }

int64_t DraftGate::best_at(double a) const {
    int64_t best = 0;
    double best_gain = 1.0;
    for (int64_t k = 1; k <= max_drafts_; ++k) {
        const double g = gain_at(k, a);
        if (g > best_gain) best = k, best_gain = g;
    }
    return best_gain >= min_gain_ ? best : 0;
}

int64_t DraftGate::best_length() const { return best_at(acceptance()); }

int64_t DraftGate::next() {
    // Warm-up: the first verify whatever the prior says; the next ones while drafting could still pay were the next
    // verify to accept one more draft than any so far (so drafts that keep failing, where a verify row costs much,
    // stop after one verify instead of kWarmupVerifies).
    if (verifies_ < kWarmupVerifies && !off_ && (verifies_ == 0 || best_at(optimistic_acceptance()) > 0))
        return std::max(best_length(), probe_length());
    if (!off_) {
        const int64_t k = best_length();
        if (k > 0) return k;
        off_ = true;
        wait_ = std::max(next_probe_after_, min_wait_);
    }
    if (--wait_ > 0) {
        ++steps_off_;
        return 0;
    }
    // A probe: the length the prior's optimism (a = 1/2) would choose, at least one draft.
    next_probe_after_ = std::min<int64_t>(next_probe_after_ * 2, 1024);
    wait_ = std::max(next_probe_after_, min_wait_);
    return probe_length();
}

void DraftGate::record(int64_t drafted, int64_t accepted) {
    SLUICE_ASSERT(drafted > 0 && accepted >= 0 && accepted <= drafted, "draft gate: ", accepted, " of ", drafted);
    ++verifies_;
    successes_ = successes_ * kForget + double(accepted);
    failures_ = failures_ * kForget + (accepted < drafted ? 1.0 : 0.0);
    if (off_ && best_length() > 0) {  // a probe that paid: back on, and the next fall starts the waits afresh
        off_ = false;
        next_probe_after_ = probe_after_;
    }
}

}  // namespace sluice
