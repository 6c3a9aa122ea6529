#include "commands.h"
#include "core/error.h"

namespace sluice::cli {

void register_synth(CLI::App& app) {
    auto* sub = app.add_subcommand("synth", "(in progress)");
    sub->callback([] { fail("synth: not implemented yet"); });
}

}  // namespace sluice::cli
