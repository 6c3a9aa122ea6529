// sluice logits -m DIR --ids 5,17,3 -o out.npy : float32 [n_ids, vocab], row i = next-token logits after ids[0..i].
#include <algorithm>
#include <memory>

#include "commands.h"
#include "common.h"
#include "core/log.h"
#include "core/npy.h"
#include "models/model.h"
#include "runtime/generate.h"

namespace sluice::cli {

void register_logits(CLI::App& app) {
    struct Args {
        ModelArgs m;
        std::string ids, out;
        int64_t chunk = 512;
    };
    auto a = std::make_shared<Args>();
    auto* sub = app.add_subcommand("logits", "Write next-token logits for every prefix of --ids as a .npy file");
    add_model_args(sub, a->m);
    sub->add_option("--ids", a->ids, "token ids: 5,17,3 or [5, 17, 3] (as sluice tokenize prints)")->required();
    sub->add_option("-o,--output", a->out, "output .npy path (float32 [n_ids, vocab])")->required();
    sub->add_option("--chunk", a->chunk, "prompt rows per forward pass")->check(positive());
    sub->callback([a] {
        const auto ids = parse_ids(a->ids);
        LoadOptions lo = a->m.to_options();
        lo.max_pass_rows = std::clamp<int64_t>(int64_t(ids.size()), 1, a->chunk);  // the arena holds one pass
        auto model = load_model(a->m.model, lo);
        const auto logits = prompt_logits(*model, ids, a->chunk);
        npy_write_f32(a->out, logits.data(), {int64_t(ids.size()), model->info().vocab_size});
        log_info("wrote ", a->out, ": [", ids.size(), ", ", model->info().vocab_size, "] float32");
    });
}

}  // namespace sluice::cli
