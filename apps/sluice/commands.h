// Each subcommand lives in its own cmd_<name>.cpp and registers itself on the top-level CLI11 app; the
// registered callback runs after parsing. Errors are thrown as sluice::Error and printed once by main().
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace sluice::cli {

void register_logits(CLI::App& app);
void register_generate(CLI::App& app);
void register_inspect(CLI::App& app);
void register_synth(CLI::App& app);
void register_demo(CLI::App& app);
void register_bench(CLI::App& app);
void register_bench_io(CLI::App& app);
void register_tokenize(CLI::App& app);  // tokenize and detokenize
void register_template(CLI::App& app);
void register_pack(CLI::App& app);
void register_serve(CLI::App& app);
void register_batch(CLI::App& app);
void register_plan(CLI::App& app);

// inspect on a GGUF file (inspect_gguf.cpp): by its .gguf name or its "GGUF" magic.
bool is_gguf_path(const std::string& path);
void inspect_gguf(const std::string& path, bool json);

}  // namespace sluice::cli
