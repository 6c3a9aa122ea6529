// The pays-off gate of speculative decoding: how many drafts a request verifies next step (0: draft nothing).
//
// Verifying k drafts runs k + 1 rows instead of one. For a model streamed from SSD (or read from RAM: decode is
// bandwidth-bound either way) a pass costs the bytes it reads: the spine once, plus, per MoE layer, the union of the
// experts its rows route to — E (1 - (1 - K/E)^rows) experts for independent routing (real routing overlaps more,
// so this errs towards drafting less). A draft model adds its own bytes per drafted token. What k drafts buy is the
// expected tokens per verify, (1 - a^(k+1)) / (1 - a), with a the chance that a draft is accepted, estimated from
// this request's own verifies (a geometric fit: every accepted draft a success, every verify that ended in a
// rejection one failure), with a prior of one success and one failure, and older verifies weighing less.
//
// The gate picks the k in [0, max_drafts] with the most tokens per byte; 0 when no length gains at least
// `min_gain` over plain decoding. The first step verifies at least one draft whatever the prior says, and so do the
// next ones up to kWarmupVerifies while drafting could still pay were the next verify to accept one more draft than
// any so far: a request learns its drafter's acceptance before judging it, but drafts that keep failing where a
// verify row costs much are judged after one verify. While off it probes again (one verify at the best length it
// would choose with the prior's optimism), first after `probe_after` steps, doubling after every probe that fails to
// turn it back on, and never sooner than a probe's extra bytes over a plain pass allow for them to stay within 2% of
// the bytes read in between (a probe that doubles a pass waits at least 50 steps).
//
// Everything the gate sees is the request's own history and the model's configuration — never timings or what else
// is in the batch — so a seeded sampled request draws the same tokens however it is batched (its random draws
// depend on how many drafts were verified).
//
// Bytes are weighed by where they come from (draft_cost): when the target's routed experts stream from the drive
// (its residency plan cannot cache them all), decode is bound by the drive, and a byte read from RAM (the resident
// spine, a draft model held in memory) costs kRamByteWeight of one read from the drive; when nothing streams, every
// byte counts alike (decode is then bound by memory bandwidth).
#pragma once

#include <cstdint>
#include <span>

namespace sluice {

struct DraftCost {
    double spine_bytes = 0;          // read once per pass
    double expert_bytes = 0;         // one routed expert
    int64_t n_moe_layers = 0, n_experts = 0, top_k = 0;
    double draft_bytes_per_token = 0;  // a draft model's bytes per drafted token (0: prompt lookup)
    // Bytes a pass of `rows` rows reads under independent routing, drafting included for rows - 1 drafts.
    double pass_bytes(int64_t rows) const;
};

class Model;

// RAM bytes against drive bytes while the experts stream: an assumed ratio (~100 GB/s of memory against a 7 GB/s
// NVMe drive; ~34 against ~2 on the CI-class machine).
inline constexpr double kRamByteWeight = 1.0 / 16;
// kRamByteWeight when the target's routed experts stream from the drive, else 1.
double ram_byte_weight(const Model& target);
// The target's pass cost in drive bytes: its streamed spine layers count fully, the resident spine at
// ram_byte_weight(target), each routed expert fully (a miss is read from the drive; cache hits are not assumed).
DraftCost draft_cost(const Model& target, double draft_bytes_per_token);
// A draft model's bytes per drafted token in the same unit: what it streams counts fully, what it holds in RAM at
// ram_weight (the target's ram_byte_weight).
double draft_pass_bytes(const Model& draft, double ram_weight);

// How many of a block's drafts to verify, from a confidence per draft: confidence[i] the chance that draft i is
// accepted if every draft before it was (DSpark's confidence head; the model authors' evaluation scores the running
// product as the chance that the first i drafts all survive verification). Verifying k drafts then yields
// 1 + sum_{i <= k} prod_{r <= i} confidence[r] tokens in expectation and reads pass_bytes(k + 1): the k in
// [0, confidence.size()] with the most tokens per byte, the shorter on a tie. This is DSpark's confidence-scheduled
// verification with the pass's bytes in place of the serving engine's profiled throughput curve. The bytes of the
// drafting itself are not counted (the block is drafted by then), so pass `cost` with draft_bytes_per_token 0.
int64_t confidence_cut(const DraftCost& cost, std::span<const float> confidence);

class DraftGate {
public:
    static constexpr int64_t kWarmupVerifies = 3;
    DraftGate(DraftCost cost, int64_t max_drafts, double min_gain = 1.03, int64_t probe_after = 16);

    // Drafts to verify at this decode step (may be 0). Call once per decode step.
    int64_t next();
    // The outcome of a step that verified `drafted` drafts (> 0), keeping `accepted` of them.
    void record(int64_t drafted, int64_t accepted);

    double acceptance() const;          // the current estimate of a
    double gain(int64_t k) const;       // tokens per byte at k drafts over plain decoding's, at the current estimate
    int64_t best_length() const;        // the k gain() is largest at (0 when none reaches min_gain)
    bool off() const { return off_; }
    int64_t steps_off() const { return steps_off_; }  // decode steps that drafted nothing because of the gate

private:
    double gain_at(int64_t k, double a) const;
    int64_t best_at(double a) const;
    int64_t probe_length() const;             // a probe's drafts: the prior's choice, at least one
    double optimistic_acceptance() const;     // the estimate were the next verify to accept one more draft

    DraftCost cost_;
    int64_t max_drafts_;
    double min_gain_;
    double successes_ = 1, failures_ = 1;  // the prior
    bool off_ = false;
    int64_t wait_ = 0, probe_after_, next_probe_after_;
    int64_t min_wait_ = 0;  // the fewest steps between probes for their cost (kProbeShare)
    int64_t steps_off_ = 0;
    int64_t verifies_ = 0;
};

}  // namespace sluice
