// `sluice tokenize -m DIR [--special]`: stdin text -> one JSON array of ids on stdout.
// `sluice detokenize -m DIR`: a JSON array of ids on stdin -> the decoded text on stdout.
// Also `sluice tokenize -m DIR --bench FILE`: encoding speed in MB/s over FILE (used by bench_tokenizer.py).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "common.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace sluice::cli {

namespace {

std::string read_stdin() {
    std::ostringstream ss;
    ss << std::cin.rdbuf();
    return ss.str();
}

void run_bench(const tok::Tokenizer& tok, const std::string& path, int repeats) {
    std::ifstream in(path, std::ios::binary);
    SLUICE_CHECK(in, "tokenize --bench: cannot open ", path);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // NUL bytes separate documents, each encoded by its own call.
    std::vector<std::string_view> docs;
    for (size_t pos = 0; pos <= text.size();) {
        size_t end = text.find('\0', pos);
        if (end == std::string::npos) end = text.size();
        docs.push_back(std::string_view(text).substr(pos, end - pos));
        pos = end + 1;
    }
    auto pass = [&] {
        size_t n = 0;
        for (std::string_view d : docs) n += tok.encode(d, false).size();
        return n;
    };
    size_t ids = pass();  // warm-up, fills the word cache as the reference's does
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < repeats; ++r) ids = pass();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("{\"bytes\": %zu, \"ids\": %zu, \"seconds\": %.6f, \"mb_per_s\": %.3f}\n", text.size(), ids,
                secs / repeats, text.size() * repeats / secs / 1e6);
}

}  // namespace

void register_tokenize(CLI::App& app) {
    auto* tok_cmd = app.add_subcommand("tokenize", "Print the token ids of stdin as a JSON array");
    struct Options {
        std::string dir, bench;
        bool special = false;
        int repeats = 3;
    };
    auto opt = std::make_shared<Options>();
    tok_cmd->add_option("-m,--model", opt->dir, "Model folder with tokenizer.json or tiktoken.model")->required();
    tok_cmd->add_flag("--special", opt->special, "Add the BOS/EOS the tokenizer config asks for");
    tok_cmd->add_option("--bench", opt->bench, "Measure encoding speed over this file instead (NUL separates documents)");
    tok_cmd->add_option("--repeats", opt->repeats, "Timed passes for --bench")->check(positive());
    tok_cmd->callback([opt] {
        const auto tok = tok::load_tokenizer(opt->dir);
        if (!opt->bench.empty()) return run_bench(*tok, opt->bench, opt->repeats);
        const auto ids = tok->encode(read_stdin(), opt->special);
        std::cout << nlohmann::json(ids).dump() << "\n";
    });

    auto* detok_cmd = app.add_subcommand("detokenize", "Print the text of a JSON array of ids read from stdin");
    auto ddir = std::make_shared<std::string>();
    detok_cmd->add_option("-m,--model", *ddir, "Model folder with tokenizer.json or tiktoken.model")->required();
    detok_cmd->callback([ddir] {
        const auto tok = tok::load_tokenizer(*ddir);
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(read_stdin());
        } catch (const nlohmann::json::exception& e) {
            fail("detokenize: stdin is not valid JSON: ", e.what());
        }
        SLUICE_CHECK(j.is_array(), "detokenize: stdin must be a JSON array of token ids");
        std::vector<int32_t> ids;
        for (size_t i = 0; i < j.size(); ++i) {
            SLUICE_CHECK(j[i].is_number_integer(), "detokenize: element ", i, " is not an integer");
            const auto v = j[i].get<int64_t>();
            SLUICE_CHECK(v >= 0 && v < tok->vocab_size(), "detokenize: id ", v, " at element ", i,
                         " is out of range (vocab size ", tok->vocab_size(), ")");
            ids.push_back(static_cast<int32_t>(v));
        }
        std::cout << tok->decode(ids);
    });
}

}  // namespace sluice::cli
