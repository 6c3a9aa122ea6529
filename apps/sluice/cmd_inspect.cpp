// sluice inspect -m DIR [--json]: architecture, parameter counts, experts, bytes per expert, dtypes, and what a
// token must read. -m FILE.gguf describes a GGUF file instead (inspect_gguf.cpp).
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "common.h"
#include "models/model.h"

namespace sluice::cli {

namespace {
std::string human_count(double v) {
    const char* units[] = {"", "K", "M", "B", "T"};
    int u = 0;
    while (v >= 1000 && u < 4) {
        v /= 1000;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f%s", v, units[u]);
    return buf;
}
}  // namespace

void register_inspect(CLI::App& app) {
    struct Args {
        ModelArgs m;
        bool json = false;
        double drive_gbps = 0;
    };
    auto a = std::make_shared<Args>();
    auto* sub = app.add_subcommand(
        "inspect", "Describe a model folder (architecture, parameters, experts, bytes) or a .gguf file");
    add_model_args(sub, a->m);
    sub->add_flag("--json", a->json, "print JSON");
    sub->add_option("--drive-gbps", a->drive_gbps, "drive read bandwidth for the tokens/s estimate (with --memory)")
        ->check(non_negative());
    sub->callback([a] {
        if (is_gguf_path(a->m.model)) return inspect_gguf(a->m.model, a->json);
        LoadOptions lo = a->m.to_options();
        lo.n_threads = 1;
        auto model = load_model(a->m.model, lo);
        const ModelInfo& i = model->info();
        const uint64_t expert_read_per_token =
            i.expert_bytes * uint64_t(i.num_experts_per_tok) * uint64_t(i.n_moe_layers);
        if (a->json) {
            nlohmann::json j;
            j["architecture"] = i.architecture;
            j["model_type"] = i.model_type;
            j["vocab_size"] = i.vocab_size;
            j["hidden_size"] = i.hidden_size;
            j["num_hidden_layers"] = i.num_hidden_layers;
            j["n_moe_layers"] = i.n_moe_layers;
            j["n_routed_experts"] = i.n_routed_experts;
            j["num_experts_per_tok"] = i.num_experts_per_tok;
            j["n_shared_experts"] = i.n_shared_experts;
            j["params_total"] = i.params_total;
            j["params_active"] = i.params_active;
            j["expert_bytes"] = i.expert_bytes;
            j["routed_expert_bytes_total"] = i.routed_expert_bytes_total;
            j["spine_bytes"] = i.spine_bytes;
            j["expert_bytes_read_per_token"] = expert_read_per_token;
            j["bytes_by_dtype"] = i.bytes_by_dtype;
            std::printf("%s\n", j.dump().c_str());
            return;
        }
        std::printf("architecture     %s (model_type %s)\n", i.architecture.c_str(), i.model_type.c_str());
        std::printf("layers           %lld (%lld MoE), hidden %lld, vocab %lld\n", (long long)i.num_hidden_layers,
                    (long long)i.n_moe_layers, (long long)i.hidden_size, (long long)i.vocab_size);
        std::printf("parameters       %s total, %s active per token\n", human_count(double(i.params_total)).c_str(),
                    human_count(double(i.params_active)).c_str());
        std::printf("experts          %lld routed per layer, %lld active, %lld shared\n", (long long)i.n_routed_experts,
                    (long long)i.num_experts_per_tok, (long long)i.n_shared_experts);
        std::printf("bytes per expert %s (%llu)\n", human_bytes(uint64_t(i.expert_bytes)).c_str(),
                    (unsigned long long)i.expert_bytes);
        std::printf("routed experts   %s; spine (everything else) %s\n",
                    human_bytes(uint64_t(i.routed_expert_bytes_total)).c_str(),
                    human_bytes(uint64_t(i.spine_bytes)).c_str());
        std::printf("per token        reads %s of routed experts when none is cached\n",
                    human_bytes(uint64_t(expert_read_per_token)).c_str());
        std::printf("dtypes          ");
        for (const auto& [k, v] : i.bytes_by_dtype) std::printf(" %s %s;", k.c_str(), human_bytes(uint64_t(v)).c_str());
        std::printf("\n");
        if (model->residency() || a->drive_gbps > 0) print_plan(*model, a->drive_gbps, stdout);
    });
}

}  // namespace sluice::cli
