// sluice demo: the quick start's main job. Makes the built-in default model on first use — a random-weight
// checkpoint with Kimi K2's architecture scaled down 8x (hub layout, BF16, 64 experts per layer, its own small
// tokenizer), kept in the cache folder — then generates from it with experts streamed from disk under a memory
// budget smaller than the model, and prints the text, the speed and the I/O figures.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "commands.h"
#include "common.h"
#include "core/error.h"
#include "core/log.h"
#include "experts/residency.h"
#include "models/model.h"
#include "models/synth.h"
#include "runtime/generate.h"
#include "tokenizer/tokenizer.h"

namespace sluice::cli {

namespace fs = std::filesystem;

namespace {

fs::path cache_dir() {
    if (const char* d = std::getenv("SLUICE_CACHE_DIR"); d && *d) return d;
    if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return fs::path(d) / "sluice";
    if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "sluice";
    return fs::temp_directory_path() / "sluice-cache";
}

// The folder is complete once config.json exists: synth writes into a temporary folder renamed at the end.
std::string ensure_default_model() {
    const fs::path dir = cache_dir() / "default-kimi-k2-s8-v1";
    if (fs::exists(dir / "config.json")) return dir.string();
    const fs::path tmp = cache_dir() / ("default-kimi-k2-s8-v1.partial-" + std::to_string(::getpid()));
    std::error_code ec;
    fs::create_directories(cache_dir(), ec);
    SLUICE_CHECK(!ec, cache_dir().string(), ": cannot create the cache folder: ", ec.message());
    SynthOptions o;
    o.like = "kimi-k2";
    o.layers = 6;
    o.experts = 64;
    o.scale_down = 8;
    o.expert_dtype = "bf16";
    o.seed = 1;
    o.out_dir = tmp.string();
    o.force = true;
    std::fprintf(stderr, "demo: making the default model (Kimi-K2 architecture / 8, random weights) in %s\n",
                 dir.string().c_str());
    o.progress = [](uint64_t done, uint64_t total) {
        std::fprintf(stderr, "\rdemo: synth %.0f / %.0f MB", double(done) / 1e6, double(total) / 1e6);
        std::fflush(stderr);
    };
    synth_checkpoint(o);
    std::fprintf(stderr, "\n");
    fs::rename(tmp, dir, ec);
    if (ec && !fs::exists(dir / "config.json")) fail(dir.string(), ": cannot move the new model into place: ", ec.message());
    fs::remove_all(tmp, ec);
    return dir.string();
}

}  // namespace

void register_demo(CLI::App& app) {
    struct Args {
        std::string prompt = "The quick brown fox";
        int64_t n = 48;
        std::string memory = "160M";
        float temp = 0.8f;
        uint64_t seed = 1;
        int threads = 0;
    };
    auto a = std::make_shared<Args>();
    auto* sub = app.add_subcommand("demo", "Make the built-in default model (first use) and generate from it, streaming experts");
    sub->add_option("-p,--prompt", a->prompt, "prompt text")->capture_default_str();
    sub->add_option("-n,--n-predict", a->n, "tokens to generate")->check(non_negative())->capture_default_str();
    sub->add_option("--memory", a->memory, "memory budget (the model is larger: experts stream)")->capture_default_str();
    sub->add_option("--temp,--temperature", a->temp, "sampling temperature")
        ->check(non_negative())
        ->capture_default_str();
    sub->add_option("-s,--seed", a->seed, "random seed")->capture_default_str();
    sub->add_option("-t,--threads", a->threads, "worker threads (0 = all cores)")->check(non_negative());
    sub->callback([a] {
        const std::string dir = ensure_default_model();
        auto tok = tok::load_tokenizer(dir);
        LoadOptions lo;
        lo.n_threads = a->threads;
        lo.memory_budget_bytes = parse_size(a->memory);
        lo.max_context_tokens = 1024;
        auto model = load_model(dir, lo);
        const ModelInfo& info = model->info();
        std::fprintf(stderr, "model: %s, %lld layers, %lld experts/layer (%lld active), %s of routed experts; budget %s\n",
                     dir.c_str(), (long long)info.num_hidden_layers, (long long)info.n_routed_experts,
                     (long long)info.num_experts_per_tok, format_bytes(info.routed_expert_bytes_total).c_str(),
                     a->memory.c_str());
        std::fprintf(stderr, "note: the weights are random, so the text is noise; the point is the machinery.\n");
        auto prompt = tok->encode(a->prompt, true);
        GenerateOptions opt;
        opt.max_new_tokens = a->n;
        opt.stop_at_eos = false;
        opt.sampling = {.temperature = a->temp, .seed = a->seed};
        tok::StreamDecoder dec(*tok, true);
        std::printf("%s", a->prompt.c_str());
        auto r = generate(*model, prompt, opt, [&](int32_t id) {
            std::string piece = id < tok->vocab_size() ? dec.push(id) : "";
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
            return true;
        });
        const std::string rest = dec.finish();
        std::printf("%s\n", rest.c_str());
        std::fflush(stdout);
        const int64_t steps = int64_t(r.ids.size()) - 1;
        std::fprintf(stderr, "prompt %lld tokens: %.1f tok/s; generated %zu tokens: %.2f tok/s decode\n",
                     (long long)r.n_prompt, r.prefill_ms > 0 ? 1000.0 * double(r.n_prompt) / r.prefill_ms : 0.0,
                     r.ids.size(), steps > 0 ? 1000.0 * double(steps) / r.decode_ms : 0.0);
        print_stats(*model, r.prefill_ms + r.decode_ms, r.n_prompt + int64_t(r.ids.size()), stderr);
    });
}

}  // namespace sluice::cli
