#include "commands.h"
#include "core/error.h"

namespace sluice::cli {

void register_inspect(CLI::App& app) {
    auto* sub = app.add_subcommand("inspect", "(in progress)");
    sub->callback([] { fail("inspect: not implemented yet"); });
}

}  // namespace sluice::cli
