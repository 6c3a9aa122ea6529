// Shared by the batch runner's tests (test_batch_job, test_batch_shard): a small synthesized model, input lines,
// running a job, and reading its results without the per-run random ids.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "api/batch_job.h"
#include "models/model.h"
#include "models/synth.h"
#include "runtime/engine.h"
#include "scratch_dir.h"
#include "test_util.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace sluice::test::batch {

using nlohmann::json;
namespace fs = std::filesystem;


inline const fs::path& model_dir() {
    static const fs::path dir = [] {
        fs::path d = scratch_dir("batch_job_model");
        synth_checkpoint(small_k2_options(d.string(), 2, 8, 32));
        return d;
    }();
    return dir;
}

struct Loaded {
    std::unique_ptr<Model> model = load_model(model_dir().string());
    std::unique_ptr<tok::Tokenizer> tok = tok::load_tokenizer(model_dir().string());
    ChatTemplate tmpl = ChatTemplate::from_model_dir(model_dir());
};

inline std::string read(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

inline std::vector<json> read_lines(const fs::path& p) {
    std::vector<json> v;
    std::istringstream in(read(p));
    for (std::string l; std::getline(in, l);)
        if (!l.empty()) v.push_back(json::parse(l));
    return v;
}

inline std::map<std::string, json> by_id(const std::vector<json>& lines) {
    std::map<std::string, json> m;
    for (const auto& l : lines) m[l["custom_id"].get<std::string>()] = l;
    return m;
}

inline json chat_line(const std::string& id, const std::string& text, int max_tokens, json extra = json::object()) {
    json body = {{"model", "m"},
                 {"messages", json::array({{{"role", "user"}, {"content", text}}})},
                 {"max_tokens", max_tokens},
                 {"temperature", 0}};
    body.update(extra);
    return {{"custom_id", id}, {"method", "POST"}, {"url", "/v1/chat/completions"}, {"body", body}};
}

inline json completion_line(const std::string& id, const std::string& prompt, int max_tokens, json extra = json::object()) {
    json body = {{"model", "m"}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
    body.update(extra);
    return {{"custom_id", id}, {"method", "POST"}, {"url", "/v1/completions"}, {"body", body}};
}

inline void write_lines(const fs::path& p, const std::vector<std::string>& lines) {
    std::ofstream f(p, std::ios::binary);
    for (const auto& l : lines) f << l << "\n";
}

inline std::vector<std::string> mixed_input() {
    return {chat_line("c1", "Hello there", 9).dump(),
            completion_line("p1", "Once upon a time", 12).dump(),
            chat_line("c2", "Tell me a story about the sea", 7, {{"temperature", 0.9}, {"seed", 3}}).dump(),
            completion_line("p2", "x", 5, {{"stop", "e"}}).dump(),
            completion_line("p3", "The quick brown fox jumps", 14, {{"n", 2}, {"temperature", 1.0}, {"seed", 11}})
                .dump(),
            chat_line("c3", "Count to ten", 10, {{"logprobs", true}, {"top_logprobs", 2}}).dump()};
}

inline api::BatchSummary run(Loaded& m, const fs::path& dir, int64_t parallel, api::BatchOptions o = {}) {
    EngineOptions eo;
    eo.max_sequences = parallel;
    eo.max_batch_rows = 16;
    eo.max_context_tokens = 4096;
    Engine engine(*m.model, eo);
    if (o.input_path.empty()) o.input_path = (dir / "in.jsonl").string();
    if (o.output_path.empty()) o.output_path = (dir / "out.jsonl").string();
    o.model_id = "synth";
    o.progress_interval_s = 0;
    return api::run_batch(engine, *m.tok, &m.tmpl, o);
}

// Results without the per-run random ids: custom_id -> response body with id/created removed.
inline std::map<std::string, json> bodies(const fs::path& out) {
    std::map<std::string, json> m;
    for (auto& [id, l] : by_id(read_lines(out))) {
        json b = l["response"]["body"];
        b.erase("id");
        b.erase("created");
        m[id] = b;
    }
    return m;
}


}  // namespace sluice::test::batch
