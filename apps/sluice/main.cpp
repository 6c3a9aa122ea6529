// sluice: run mixture-of-experts models far larger than memory by streaming experts from SSD.
#include <cstdio>
#include <exception>

#include "commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
    CLI::App app{"sluice: exact MoE inference with experts streamed from SSD"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "sluice 0.1.0");
    sluice::cli::register_logits(app);
    sluice::cli::register_generate(app);
    sluice::cli::register_inspect(app);
    sluice::cli::register_synth(app);
    sluice::cli::register_demo(app);
    sluice::cli::register_bench(app);
    sluice::cli::register_bench_io(app);
    sluice::cli::register_tokenize(app);
    sluice::cli::register_template(app);
    sluice::cli::register_pack(app);
    sluice::cli::register_serve(app);
    sluice::cli::register_batch(app);
    sluice::cli::register_plan(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
        // A bad command line: one line, like every other error, and status 2 as usage errors have elsewhere.
        std::fprintf(stderr, "sluice: error: %s (--help lists the options)\n", e.what());
        return 2;
    } catch (const sluice::Error& e) {
        std::fprintf(stderr, "sluice: error: %s\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "sluice: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
