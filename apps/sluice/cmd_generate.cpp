#include "commands.h"
#include "core/error.h"

namespace sluice::cli {

void register_generate(CLI::App& app) {
    auto* sub = app.add_subcommand("generate", "(in progress)");
    sub->callback([] { fail("generate: not implemented yet"); });
}

}  // namespace sluice::cli
