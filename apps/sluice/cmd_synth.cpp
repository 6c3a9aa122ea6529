// `sluice synth`: writes a random-weight checkpoint with a named model's layout (models/synth.h), with a
// progress line on stderr and a one-line summary on stdout.
#include <chrono>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "core/error.h"
#include "models/synth.h"

namespace sluice::cli {

namespace {

struct SynthArgs {
    SynthOptions opts;
    std::string seed = "0";
    double shard_size_mb = 0;
};

uint64_t parse_seed(const std::string& s) {
    size_t used = 0;
    uint64_t v = 0;
    try {
        v = std::stoull(s, &used, 0);
    } catch (const std::exception&) {
        used = 0;
    }
    SLUICE_CHECK(used == s.size() && !s.empty() && s[0] != '-', "synth: --seed must be a non-negative integer, got '",
                 s, "'");
    return v;
}

void run_synth(SynthArgs& a) {
    SynthOptions& o = a.opts;
    o.seed = parse_seed(a.seed);
    SLUICE_CHECK(a.shard_size_mb >= 0, "synth: --shard-size-mb must be >= 0, got ", a.shard_size_mb);
    o.shard_bytes = uint64_t(a.shard_size_mb * 1024 * 1024);
    const auto t0 = std::chrono::steady_clock::now();
    auto last = t0;
    bool printed = false;
    o.progress = [&](uint64_t done, uint64_t total) {
        const auto now = std::chrono::steady_clock::now();
        if (done < total && now - last < std::chrono::milliseconds(250)) return;
        last = now;
        const double s = std::chrono::duration<double>(now - t0).count();
        std::fprintf(stderr, "\rsynth: %.1f / %.1f MB (%3.0f%%) %.0f MB/s   ", double(done) / 1e6, double(total) / 1e6,
                     total ? 100.0 * double(done) / double(total) : 100.0, s > 0 ? double(done) / 1e6 / s : 0.0);
        std::fflush(stderr);
        printed = true;
    };
    SynthResult r = synth_checkpoint(o);
    if (printed) std::fprintf(stderr, "\n");
    std::printf("synth: wrote %zu files (%zu tensors, %.1f MB) to %s in %.2f s (%.0f MB/s)\n", r.files.size(),
                r.n_tensors, double(r.bytes_written) / 1e6, o.out_dir.c_str(), r.seconds,
                r.seconds > 0 ? double(r.bytes_written) / 1e6 / r.seconds : 0.0);
}

}  // namespace

void register_synth(CLI::App& app) {
    auto args = std::make_shared<SynthArgs>();
    auto* sub = app.add_subcommand(
        "synth", "Write a random-weight checkpoint in the Hugging Face hub layout of a named model");
    sub->footer(
        "Weights are deterministic in the seed. Routed experts use --expert-dtype: bf16 or f32 (rest BF16), fp8\n"
        "(the DeepSeek/Kimi-K2 hub layout: every Linear but router/embeddings/lm_head in F8_E4M3 + F32 128x128\n"
        "weight_scale_inv), int4 (Kimi-K2-Thinking compressed-tensors pack-quantized experts, group 32) or\n"
        "mxfp4 (kimi-k3: the K3 release's E2M1 + E8M0 experts, the vision tower is not synthesized; gpt-oss:\n"
        "its release layout, stacked _blocks/_scales + biases, the default and only format for gpt-oss).\n"
        "kimi-linear, qwen3-moe and mixtral take bf16, f32 or fp8.\n"
        "--scale-down K divides widths, heads and LoRA ranks by K (kept valid). A small byte-level tokenizer\n"
        "(512 ids) is written too, and the vocabulary is its size unless --vocab-size asks for more rows (the\n"
        "real model's, e.g. 163840 for Kimi K2, to get its embedding and head bytes).\n"
        "kimi-k3-dspark writes K3's DSpark drafter (Inferact/Kimi-K3-DSpark layout: config.json and the 68\n"
        "tensors for --layers 5) sized for --target K3_DIR; its own widths follow --scale-down.\n"
        "kimi-k3-eagle3 writes K3's EAGLE-3 drafter (lightseekorg/kimi-k3-eagle3.1-mla layout: config.json and\n"
        "its 19 tensors plus the copy of the target's embedding; one layer) sized for --target K3_DIR likewise.\n"
        "Example: sluice synth --like kimi-k2 --layers 2 --experts 8 --scale-down 16 -o m");
    sub->add_option("--like", args->opts.like, "Model layout to copy: " + synth_model_names())->required();
    sub->add_option("--layers", args->opts.layers, "Number of layers (num_hidden_layers)")->required();
    sub->add_option("--experts", args->opts.experts,
                    "Routed experts per MoE layer (top-k is clamped to it; not used by kimi-k3-dspark)")
        ->capture_default_str();
    sub->add_option("--target", args->opts.target_dir,
                    "kimi-k3-dspark, kimi-k3-eagle3: the Kimi K3 checkpoint the drafter is sized for (hidden size, vocabulary, "
                    "tapped layers; its embedding is copied)");
    sub->add_option("--draft-vocab-size", args->opts.draft_vocab_size,
                    "kimi-k3-eagle3: a head over this many of the target's tokens (evenly spaced ids), with the d2t "
                    "tensor that maps them (default: the target's whole vocabulary, as the release)");
    sub->add_option("--top-k", args->opts.top_k,
                    "Experts per token (kimi-k2, deepseek-v3 layouts; default: the layout's, clamped to --experts)");
    sub->add_option("--expert-dtype", args->opts.expert_dtype,
                    "Expert dtype: " + synth_dtype_names() + " (default bf16; gpt-oss: mxfp4)");
    sub->add_option("--scale-down", args->opts.scale_down, "Divide widths, heads and ranks by K")
        ->capture_default_str();
    sub->add_option("--vocab-size", args->opts.vocab_size, "Embedding and head rows (default: the tokenizer's 512; more: >= 512)");
    sub->add_option("--seed", args->seed, "Random seed (non-negative integer)")->capture_default_str();
    sub->add_option("--shard-size-mb", args->shard_size_mb,
                    "Split into model-0000N-of-0000M.safetensors shards of at most this many MiB (0: one file)")
        ->capture_default_str();
    sub->add_option("-o,--output", args->opts.out_dir, "Output folder (created if missing)")->required();
    sub->add_flag("--force", args->opts.force, "Allow a non-empty output folder, replacing synthesized files");
    sub->add_flag("--no-sync", [args](int64_t) { args->opts.sync = false; }, "Skip fdatasync before renaming files");
    sub->callback([args] { run_synth(*args); });
}

}  // namespace sluice::cli
