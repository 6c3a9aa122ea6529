// `sluice plan`'s output: text for people, JSON for scripts (bench/plan_check.py reads it).
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "plan/projection.h"

namespace sluice {

namespace {
std::string fmt(const char* f, double a, double b = 0, double c = 0, double d = 0) {
    char buf[256];
    std::snprintf(buf, sizeof buf, f, a, b, c, d);
    return buf;
}
std::string drives_text(const std::vector<double>& d) {
    std::string s;
    for (double g : d) s += (s.empty() ? "" : ",") + fmt("%g", g) + " GB/s";
    return s;
}
const char* timing_text(const std::string& timing) {
    if (timing == "overlap") return "max(I/O, compute) (--timing overlap): the bound for perfect overlap";
    if (timing == "serial") return "I/O + compute (--timing serial): no overlap at all";
    return "pipeline (the default): per MoE layer, the spine's matrices, then the experts computed one after "
           "another, each missed one as its read lands (plan/projection.h); at least all reads at the drives' rate";
}
std::string time_model_json(const std::string& timing) {
    return timing == "overlap" ? "max(io, compute)" : timing == "serial" ? "io + compute" : "pipeline";
}
nlohmann::json pass_json(const PassProjection& p, bool timed, bool card) {
    nlohmann::json j = {{"rows", p.rows},
                        {"distinct_experts_per_layer", p.distinct_experts},
                        {"hit_rate", p.hit_rate},
                        {"expert_bytes_read", p.expert_bytes_read},
                        {"spine_bytes_read", p.spine_bytes_read},
                        {"bytes_read_per_token", p.bytes_read_per_token()},
                        {"io_ms", p.io_ms}};
    if (card) {
        j["card_hit_rate"] = p.card_hit_rate;
        j["link_bytes"] = p.link_bytes;
        j["link_ms"] = p.link_ms;
    }
    if (timed) {
        j["compute_ms"] = p.compute_ms;
        j["pass_ms"] = p.pass_ms;
        j["tok_per_s"] = p.tok_per_s;
    } else {
        if (p.pass_ms > 0) j["io_bound_tok_per_s"] = 1000.0 * double(p.rows) / p.pass_ms;
    }
    return j;
}
std::string card_text(const ModelShape& m, const CardPlan& c) {
    std::ostringstream os;
    const uint64_t all = uint64_t(m.n_moe_layers * m.n_experts);
    os << "card: --gpu-memory " << format_bytes(c.budget_bytes) << ", link " << fmt("%g", c.link_gbps)
       << " GB/s; copies as the CUDA backend keeps them today (plan/card.h)\n"
       << "  work buffers       " << format_bytes(c.workspace_bytes) << " (estimate: the host's activation reserve)\n"
       << "  spine matrices     " << format_bytes(c.spine_kept_bytes) << " of " << format_bytes(c.spine_matrix_bytes)
       << " kept (the rest crosses the link every pass)\n";
    if (c.streamed_bytes > 0)
        os << "  streamed layers    " << (c.streamed_kept_bytes ? "kept, " : "not kept (they cross the link every pass), ")
           << format_bytes(c.streamed_bytes) << "; the drives still read them every pass\n";
    os << "  expert copies      " << c.expert_slots << " of " << all << " ("
       << fmt("%.2f%%", all ? 100.0 * double(c.expert_slots) / double(all) : 0.0)
       << "), least recently used first as the backend evicts; a host miss is still read from the drive\n\n";
    return os.str();
}
}  // namespace

std::string projection_text(const ModelShape& m, const PlanMachine& mc, const PlanSettings& s, const Projection& p) {
    std::ostringstream os;
    os << "model: " << m.source << "\n"
       << "  " << m.n_layers << " layers (" << m.n_moe_layers << " MoE) x " << m.n_experts << " experts, top "
       << m.top_k << "; expert " << format_bytes(m.expert_bytes) << " (" << m.expert_format << ", "
       << format_bytes(m.expert_slot_bytes) << " as read); spine " << format_bytes(m.spine_bytes) << "; model "
       << format_bytes(m.model_bytes()) << "\n"
       << "machine: memory " << format_bytes(mc.memory_bytes) << ", " << mc.drives_gbps.size() << " drive(s) "
       << drives_text(mc.drives_gbps) << " = " << fmt("%.2f", p.drive_gbps) << " GB/s, device " << mc.device;
    if (mc.threads > 0) os << ", " << mc.threads << " threads";
    os << "\n\n" << p.plan.describe();
    os << "  experts cached     " << p.cache_slots << " of " << m.n_moe_layers * m.n_experts << " ("
       << fmt("%.2f%%", 100 * p.cache_share) << ")\n\n";
    if (p.card) os << card_text(m, *p.card);
    os << "expert misses: " << p.hit_model << "; decode hit rate " << fmt("%.2f%%", 100 * p.hit_rate);
    if (p.popular_share > 0)
        os << " (the " << p.cache_slots << " most-used experts take " << fmt("%.2f%%", 100 * p.popular_share)
           << " of the routing)";
    os << "\n";
    os << "a pass of R rows touches E(1-(1-k/E)^R) distinct experts per MoE layer, each read once\n";
    if (p.timed)
        os << "time per pass = " << timing_text(s.timing) << "\n"
           << "kernel rates: " << (mc.rates ? std::to_string(mc.rates->threads) : std::string("?"))
           << " thread(s) as measured"
           << (mc.threads > 0 && mc.rates && mc.rates->threads > 0 && mc.threads != mc.rates->threads
                   ? ", scaled linearly to " + std::to_string(mc.threads)
                   : std::string())
           << (s.token_overhead_ms > 0
                   ? fmt("; plus %.3f ms a row outside the matmuls (--token-overhead-ms)\n", s.token_overhead_ms)
                   : std::string("; attention over the context is not counted\n"));
    else
        os << "no time projection: " << p.untimed_reason << "\n";
    os << "\n";
    char line[256];
    std::snprintf(line, sizeof line, "%-18s %6s %9s %6s %13s %9s %11s %10s %10s\n", "", "rows", "experts", "hits",
                  "MB read/tok", "I/O ms", "compute ms", "pass ms", "tok/s");
    os << line;
    auto print = [&](const std::string& what, const PassProjection& x) {
        const bool reads = x.pass_ms > 0;
        const std::string tps = p.timed ? fmt("%.2f", x.tok_per_s)
                                : reads ? fmt("%.2f", 1000.0 * double(x.rows) / x.pass_ms)
                                        : std::string("-");
        const char* ceiling = x.link_ms > x.io_ms ? " (link-bound ceiling)" : " (drive-bound ceiling)";
        std::snprintf(line, sizeof line, "%-18s %6lld %9.1f %5.1f%% %13.3f %9.2f %11s %10s %10s%s\n", what.c_str(),
                      (long long)x.rows, x.distinct_experts, 100 * x.hit_rate, x.bytes_read_per_token() / 1e6, x.io_ms,
                      p.timed ? fmt("%.2f", x.compute_ms).c_str() : "-", p.timed ? fmt("%.2f", x.pass_ms).c_str() : "-",
                      tps.c_str(), p.timed ? "" : reads ? ceiling : " (nothing to read: not drive-bound)");
        os << line;
    };
    print("decode", p.decode);
    print("prefill chunk", p.prefill);
    for (const auto& b : p.batches) print("batch B=" + std::to_string(b.rows), b);
    if (p.card) {
        os << "\n";
        std::snprintf(line, sizeof line, "%-18s %10s %14s %9s\n", "to the card", "card hits", "MB copied/tok",
                      "link ms");
        os << line;
        auto print_link = [&](const std::string& what, const PassProjection& x) {
            std::snprintf(line, sizeof line, "%-18s %9.1f%% %14.3f %9.2f%s\n", what.c_str(), 100 * x.card_hit_rate,
                          x.link_bytes / double(x.rows) / 1e6, x.link_ms,
                          x.link_ms > 0 && x.link_ms >= x.pass_ms ? " (link-bound)" : "");
            os << line;
        };
        print_link("decode", p.decode);
        print_link("prefill chunk", p.prefill);
        for (const auto& b : p.batches) print_link("batch B=" + std::to_string(b.rows), b);
    }
    return os.str();
}

std::string projection_json(const ModelShape& m, const PlanMachine& mc, const PlanSettings& s, const Projection& p) {
    nlohmann::json j;
    j["model"] = {{"source", m.source},
                  {"model_type", m.model_type},
                  {"layers", m.n_layers},
                  {"moe_layers", m.n_moe_layers},
                  {"experts", m.n_experts},
                  {"top_k", m.top_k},
                  {"expert_bytes", m.expert_bytes},
                  {"expert_slot_bytes", m.expert_slot_bytes},
                  {"expert_format", m.expert_format},
                  {"spine_bytes", m.spine_bytes},
                  {"model_bytes", m.model_bytes()}};
    j["machine"] = {{"memory_bytes", mc.memory_bytes}, {"drives_gbps", mc.drives_gbps}, {"device", mc.device},
                    {"threads", mc.threads}};
    const ResidencyPlan& r = p.plan;
    j["memory_plan"] = {{"budget_bytes", r.budget_bytes},
                        {"spine_bytes", r.spine_bytes},
                        {"spine_streamed_bytes", r.spine_streamed_bytes},
                        {"first_streamed_layer", r.first_streamed_layer},
                        {"state_bytes", r.state_bytes},
                        {"staging_bytes", r.staging_bytes},
                        {"expert_cache_bytes", r.expert_cache_bytes},
                        {"min_bytes", r.min_bytes()}};
    j["cache_slots"] = p.cache_slots;
    j["cache_share"] = p.cache_share;
    j["hit_rate"] = p.hit_rate;
    j["hit_model"] = p.hit_model;
    j["drive_gbps"] = p.drive_gbps;
    j["timed"] = p.timed;
    if (!p.timed) j["untimed_reason"] = p.untimed_reason;
    j["time_model"] = p.timed ? time_model_json(s.timing) : "io only";
    j["cache_policy"] = s.cache_policy;
    j["token_overhead_ms"] = s.token_overhead_ms;
    if (p.popular_share > 0) j["popular_share"] = p.popular_share;
    j["prefill_chunk"] = s.prefill_chunk;
    if (p.card)
        j["card"] = {{"budget_bytes", p.card->budget_bytes},
                     {"workspace_bytes", p.card->workspace_bytes},
                     {"spine_matrix_bytes", p.card->spine_matrix_bytes},
                     {"spine_kept_bytes", p.card->spine_kept_bytes},
                     {"streamed_bytes", p.card->streamed_bytes},
                     {"streamed_kept_bytes", p.card->streamed_kept_bytes},
                     {"expert_slots", p.card->expert_slots},
                     {"link_gbps", p.card->link_gbps}};
    const bool card = p.card.has_value();
    j["decode"] = pass_json(p.decode, p.timed, card);
    j["prefill"] = pass_json(p.prefill, p.timed, card);
    j["batches"] = nlohmann::json::array();
    for (const auto& b : p.batches) j["batches"].push_back(pass_json(b, p.timed, card));
    return j.dump();
}

}  // namespace sluice
