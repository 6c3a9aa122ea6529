// `sluice template`: render a chat template exactly as transformers' apply_chat_template(tokenize=False) would,
// from a model directory (chat_template.jinja or tokenizer_config.json) and a JSON file of messages.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/error.h"
#include "tokenizer/chat_template.h"

namespace sluice::cli {
namespace {

struct TemplateOptions {
    std::string model_dir;
    std::string messages_path;
    bool add_generation_prompt = false;
    std::string kwargs_json = "{}";
};

nlohmann::ordered_json parse_json(const std::string& text, const std::string& what) {
    try {
        return nlohmann::ordered_json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        fail(what, ": invalid JSON: ", e.what());
    }
}

void run_template(const TemplateOptions& opt) {
    std::ifstream f(opt.messages_path, std::ios::binary);
    SLUICE_CHECK(f, "cannot open ", opt.messages_path);
    std::ostringstream ss;
    ss << f.rdbuf();
    nlohmann::ordered_json doc = parse_json(ss.str(), opt.messages_path);
    ChatRequest req;
    if (doc.is_array()) {
        req.messages = doc;
    } else {
        SLUICE_CHECK(doc.is_object() && doc.contains("messages"), opt.messages_path,
                     ": expected a list of messages or an object with \"messages\"");
        req.messages = doc["messages"];
        if (doc.contains("tools")) req.tools = doc["tools"];
    }
    req.add_generation_prompt = opt.add_generation_prompt;
    req.kwargs = parse_json(opt.kwargs_json, "--kwargs");
    SLUICE_CHECK(req.kwargs.is_object(), "--kwargs: expected a JSON object");
    ChatTemplate tpl = ChatTemplate::from_model_dir(opt.model_dir, !req.tools.is_null());
    std::string out = tpl.apply(req);
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
}

}  // namespace

void register_template(CLI::App& app) {
    auto opt = std::make_shared<TemplateOptions>();
    auto* sub = app.add_subcommand("template", "render a chat template over a conversation (as transformers does)");
    sub->add_option("-m,--model", opt->model_dir, "directory with tokenizer_config.json or chat_template.jinja")
        ->required();
    sub->add_option("--messages", opt->messages_path, "JSON file: [messages] or {\"messages\": [...], \"tools\": [...]}")
        ->required();
    sub->add_flag("--add-generation-prompt", opt->add_generation_prompt, "append the assistant turn opener");
    sub->add_option("--kwargs", opt->kwargs_json, "extra template variables as a JSON object, e.g. {\"thinking\": true}");
    sub->callback([opt] { run_template(*opt); });
}

}  // namespace sluice::cli
