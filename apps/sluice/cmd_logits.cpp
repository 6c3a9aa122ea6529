#include "commands.h"
#include "core/error.h"

namespace sluice::cli {

void register_logits(CLI::App& app) {
    auto* sub = app.add_subcommand("logits", "(in progress)");
    sub->callback([] { fail("logits: not implemented yet"); });
}

}  // namespace sluice::cli
