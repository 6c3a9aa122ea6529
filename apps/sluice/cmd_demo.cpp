// sluice demo: the quick start's main job. Generates from the trained default model that the repository ships
// (models/sluice-k2-tiny: a 12.65M-parameter DeepSeek-V3-layout MoE trained by tools/train on freely licensed text)
// with its routed experts streamed from disk under a memory budget that holds only part of them, and prints the
// text, the speed and the engine's I/O and cache figures. --random instead makes (on first use, in the cache
// folder) and runs the old random-weight checkpoint with Kimi K2's architecture scaled down 8x, whose text is noise.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <unistd.h>

#include "commands.h"
#include "common.h"
#include "core/error.h"
#include "core/log.h"
#include "experts/residency.h"
#include "experts/streaming_expert_source.h"
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

// The shipped trained model: $SLUICE_DEMO_MODEL, else models/sluice-k2-tiny found from the executable (the build
// tree's build/<preset>/bin, or an install's bin next to share/sluice), else the source tree it was built from.
std::optional<std::string> find_trained_model() {
    if (const char* d = std::getenv("SLUICE_DEMO_MODEL"); d && *d) return std::string(d);
    const char* name = "sluice-k2-tiny";
    std::vector<fs::path> candidates;
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
        const fs::path bin = exe.parent_path();
        candidates.push_back(bin / ".." / ".." / ".." / "models" / name);
        candidates.push_back(bin / ".." / "share" / "sluice" / "models" / name);
    }
#ifdef SLUICE_MODELS_DIR
    candidates.push_back(fs::path(SLUICE_MODELS_DIR) / name);
#endif
    for (const auto& c : candidates)
        if (fs::exists(c / "config.json", ec)) return fs::weakly_canonical(c, ec).string();
    return std::nullopt;
}

}  // namespace

void register_demo(CLI::App& app) {
    struct Args {
        std::string prompt = "The quick brown fox";
        int64_t n = 64;
        std::string memory;
        std::string model;
        bool random = false;
        float temp = 0.8f;
        uint64_t seed = 1;
        int threads = 0;
    };
    auto a = std::make_shared<Args>();
    auto* sub = app.add_subcommand("demo", "Generate from the shipped trained model with its experts streamed from SSD");
    sub->add_option("-p,--prompt", a->prompt, "prompt text")->capture_default_str();
    sub->add_option("-n,--n-predict", a->n, "tokens to generate")->check(non_negative())->capture_default_str();
    sub->add_option("--memory", a->memory,
                    "memory budget (default 22M for the trained model, 160M for --random: too small for all the "
                    "experts, so they stream)");
    sub->add_option("-m,--model", a->model, "another model folder instead of the shipped trained one");
    sub->add_flag("--random", a->random,
                  "the random-weight Kimi-K2-shaped checkpoint instead (made in the cache folder on first use; noise)");
    sub->add_option("--temp,--temperature", a->temp, "sampling temperature")
        ->check(non_negative())
        ->capture_default_str();
    sub->add_option("-s,--seed", a->seed, "random seed")->capture_default_str();
    sub->add_option("-t,--threads", a->threads, "worker threads (0 = all cores)")->check(non_negative());
    sub->callback([a] {
        std::string dir = a->model;
        if (dir.empty() && a->random) dir = ensure_default_model();
        if (dir.empty()) {
            auto found = find_trained_model();
            SLUICE_CHECK(found, "demo: the trained model models/sluice-k2-tiny was not found next to the executable "
                                "or in the source tree (set SLUICE_DEMO_MODEL=DIR, or use --random)");
            dir = *found;
        }
        const bool random = a->random && a->model.empty();
        if (a->memory.empty()) a->memory = random ? "160M" : "22M";
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
        if (random)
            std::fprintf(stderr, "note: the weights are random, so the text is noise; the point is the machinery.\n");
        else if (a->model.empty())
            std::fprintf(stderr,
                         "note: a small trained model (tools/train: KJV Bible, fortunes, Jargon File, GCIDE); the "
                         "expert cache holds %llu of its %llu routed experts, the rest stream from disk.\n",
                         (unsigned long long)(model->streaming() ? model->streaming()->cache().n_slots() : 0),
                         (unsigned long long)(info.expert_bytes ? info.routed_expert_bytes_total / info.expert_bytes
                                                                : 0));
        auto prompt = tok->encode(a->prompt, true);
        GenerateOptions opt;
        opt.max_new_tokens = a->n;
        opt.stop_at_eos = !random;  // a trained model ends a document with EOS
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
