// config.json -> architecture. Multimodal wrappers keep the text model in text_config; the architecture is
// chosen by `architectures[0]` when known, else by `model_type`.
#include <filesystem>
#include <optional>
#include <vector>

#include "core/error.h"
#include "models/architectures.h"
#include "ops/exec_context.h"

namespace sluice {

void check_quantization(const JsonObject& cfg);

namespace {
using Factory = std::unique_ptr<Model> (*)(const std::string&, const JsonObject&, const LoadOptions&);
using ActivationFn = uint64_t (*)(const JsonObject&, int64_t rows, bool look_ahead);
struct Entry {
    std::vector<std::string> architectures;
    std::vector<std::string> model_types;
    Factory make;
    ActivationFn activation_bytes;
};
const std::vector<Entry>& registry() {
    static const std::vector<Entry> entries = {
        {{"DeepseekV3ForCausalLM"}, {"deepseek_v3", "kimi_k2"}, make_deepseek_v3, deepseek_v3_activation_bytes},
        {{"KimiLinearForCausalLM"}, {"kimi_linear"}, make_kimi_linear, kimi_linear_activation_bytes},
        {{"KimiK3ForConditionalGeneration"}, {"kimi_k3"}, make_kimi_k3, kimi_k3_activation_bytes},
        {{"Qwen3MoeForCausalLM"}, {"qwen3_moe"}, make_qwen3_moe, qwen3_moe_activation_bytes},
        {{"MixtralForCausalLM"}, {"mixtral"}, make_mixtral, mixtral_activation_bytes},
        {{"GptOssForCausalLM"}, {"gpt_oss"}, make_gpt_oss, gpt_oss_activation_bytes},
    };
    return entries;
}
}  // namespace

// Weight formats are recognised from the tensors themselves (models/weights.h); a quantisation scheme we do not
// implement must fail at load, not be misread as something else.
void check_quantization(const JsonObject& cfg) {
    for (const JsonObject* level : {&cfg}) {
        std::optional<JsonObject> q = level->get_object("quantization_config");
        if (!q) {
            if (auto text = level->get_object("text_config")) q = text->get_object("quantization_config");
        }
        if (!q) continue;
        const std::string method = q->get_string("quant_method", "");
        if (method != "fp8" && method != "compressed-tensors" && method != "mxfp4")
            fail(q->what(), ": quant_method '", method,
                 "' is not supported (fp8 block-scaled, compressed-tensors pack-quantized/mxfp4, mxfp4)");
        if (method == "fp8" && q->has("weight_block_size")) {
            const auto b = q->get_int_list("weight_block_size");
            if (b.size() != 2 || b[0] != 128 || b[1] != 128)
                fail(q->what(), ": weight_block_size must be [128, 128] (other FP8 block shapes are not supported)");
        }
    }
}

void check_model_folder(const std::string& dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::exists(dir, ec)) fail(dir, ": no such folder");
    if (!fs::is_directory(dir, ec)) fail(dir, ": not a directory (expected a Hugging Face model folder)");
}

namespace {
const Entry& entry_for(const JsonObject& cfg, const std::string& what) {
    std::string arch;
    if (cfg.has("architectures")) {
        auto list = cfg.get_string_list("architectures");
        if (!list.empty()) arch = list[0];
    }
    const std::string model_type = cfg.get_string("model_type", "");
    for (const auto& e : registry())
        for (const auto& a : e.architectures)
            if (a == arch) return e;
    for (const auto& e : registry())
        for (const auto& t : e.model_types)
            if (t == model_type) return e;
    std::string known;
    for (const auto& e : registry())
        for (const auto& a : e.architectures) known += (known.empty() ? "" : ", ") + a;
    fail(what, ": unknown architecture '", arch, "' (model_type '", model_type, "'); supported: ", known);
}
}  // namespace

uint64_t activation_bytes_from_config(const JsonObject& cfg, int64_t rows, bool look_ahead) {
    return entry_for(cfg, cfg.what()).activation_bytes(cfg, rows, look_ahead);
}

std::unique_ptr<ExecContext> make_exec_context(const Model& model, const ExecOptions& o) {
    auto ctx = std::make_unique<ExecContext>(o.n_threads);
    ctx->arena().reserve(model.activation_bytes(o.max_pass_rows));
    return ctx;
}

std::unique_ptr<ExecContext> make_exec_context(const Model& model) {
    return make_exec_context(model, model.exec_options());
}

std::unique_ptr<Model> load_model(const std::string& dir, const LoadOptions& options) {
    namespace fs = std::filesystem;
    check_model_folder(dir);
    const std::string path = (fs::path(dir) / "config.json").string();
    if (!fs::exists(path)) fail(path, ": not found (a model folder needs config.json)");
    JsonObject cfg = JsonObject::load_file(path);
    check_quantization(cfg);
    return entry_for(cfg, path).make(dir, cfg, options);
}

}  // namespace sluice
