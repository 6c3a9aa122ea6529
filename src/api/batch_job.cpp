#include "api/batch_job.h"

#include <unistd.h>
#include <xxhash.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>

#include "api/completion_job.h"
#include "api/openai_protocol.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace sluice::api {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string random_hex(int digits) {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    static const char* hex = "0123456789abcdef";
    std::string s;
    for (int i = 0; i < digits; ++i) s += hex[rng() & 15];
    return s;
}

// xxh3 of a file, as 16 hex digits: the status file records the input's, so a resume can tell it changed.
std::string file_xxh3(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    SLUICE_CHECK(f, path, ": cannot read");
    XXH3_state_t* st = XXH3_createState();
    XXH3_64bits_reset(st);
    std::vector<char> buf(1 << 20);
    while (f.read(buf.data(), std::streamsize(buf.size())) || f.gcount() > 0)
        XXH3_64bits_update(st, buf.data(), size_t(f.gcount()));
    const uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
    return hex;
}

std::string with_suffix(const std::string& path, const std::string& suffix) {
    const std::string ext = ".jsonl";
    if (path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0)
        return path.substr(0, path.size() - ext.size()) + suffix;
    return path + suffix;
}

std::string dump(const nlohmann::ordered_json& j) {
    return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

// Appends whole lines and makes them durable: a line is either complete in the file or absent after a crash
// (resume drops an unterminated last line).
class JsonlAppender {
public:
    explicit JsonlAppender(const std::string& path) : path_(path) {
        f_ = std::fopen(path.c_str(), "ab");
        SLUICE_CHECK(f_, path, ": cannot open for appending");
    }
    ~JsonlAppender() {
        if (f_) std::fclose(f_);
    }
    void write(const nlohmann::ordered_json& j) {
        const std::string s = dump(j) + "\n";
        SLUICE_CHECK(std::fwrite(s.data(), 1, s.size(), f_) == s.size() && std::fflush(f_) == 0, path_,
                     ": write failed (disk full?)");
        const auto now = std::chrono::steady_clock::now();
        if (now - last_sync_ > std::chrono::seconds(2)) sync(now);
    }
    void sync(std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now()) {
        std::fflush(f_);
        ::fsync(fileno(f_));
        last_sync_ = now;
    }

private:
    std::string path_;
    FILE* f_ = nullptr;
    std::chrono::steady_clock::time_point last_sync_{};
};

// What earlier runs of a resumed job left: lines and the usage their responses report.
struct Earlier {
    int64_t lines = 0, input_tokens = 0, output_tokens = 0;
};

// The custom_ids already answered in a results file; an unterminated last line (a crash mid-write) is cut off.
void read_done_ids(const std::string& path, std::set<std::string>& done, Earlier& earlier) {
    if (!fs::exists(path)) return;
    std::string all;
    {
        std::ifstream f(path, std::ios::binary);
        SLUICE_CHECK(f, path, ": cannot read to resume from it");
        std::ostringstream ss;
        ss << f.rdbuf();
        all = ss.str();
    }
    const size_t end = all.rfind('\n');
    const size_t keep = end == std::string::npos ? 0 : end + 1;
    if (keep != all.size()) fs::resize_file(path, keep);
    std::istringstream in(all.substr(0, keep));
    int64_t n = 0;
    for (std::string line; std::getline(in, line);) {
        ++n;
        if (line.empty()) continue;
        json j = json::parse(line, nullptr, false);
        SLUICE_CHECK(!j.is_discarded() && j.is_object() && j.contains("custom_id") && j["custom_id"].is_string(), path,
                     ":", n, ": not a batch result line (remove the file or choose another output to start over)");
        if (!done.insert(j["custom_id"].get<std::string>()).second) continue;
        ++earlier.lines;
        const json* u = nullptr;
        if (auto r = j.find("response"); r != j.end() && r->is_object())
            if (auto b = r->find("body"); b != r->end() && b->is_object())
                if (auto it = b->find("usage"); it != b->end() && it->is_object()) u = &*it;
        if (u) {
            earlier.input_tokens += u->value("prompt_tokens", int64_t(0));
            earlier.output_tokens += u->value("completion_tokens", int64_t(0));
        }
    }
}

// OpenAI's output line, keys in the documented order.
nlohmann::ordered_json result_line(const std::string& custom_id, int status, const json& body) {
    return {{"id", "batch_req_" + random_hex(24)},
            {"custom_id", custom_id},
            {"response", {{"status_code", status}, {"request_id", "req_" + random_hex(24)}, {"body", body}}},
            {"error", nullptr}};
}

}  // namespace

BatchInput parse_batch_input(std::istream& in, const ModelContext& ctx) {
    BatchInput r;
    std::set<std::string> ids;
    int64_t n = 0;
    for (std::string text; std::getline(in, text);) {
        ++n;
        if (!text.empty() && text.back() == '\r') text.pop_back();
        if (n == 1 && text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);  // a UTF-8 byte order mark
        if (text.find_first_not_of(" \t") == std::string::npos) continue;
        std::string custom_id;
        try {
            // ordered_json keeps the body's key order (tool schemas reach the chat template as written)
            nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, false);
            if (j.is_discarded() || !j.is_object()) throw ApiError(400, "invalid_request_error", "not a JSON object");
            if (!j.contains("custom_id") || !j["custom_id"].is_string() || j["custom_id"].get<std::string>().empty())
                throw ApiError(400, "invalid_request_error", "custom_id must be a non-empty string", "custom_id");
            custom_id = j["custom_id"].get<std::string>();
            if (!ids.insert(custom_id).second)
                throw ApiError(400, "invalid_request_error", "custom_id '" + custom_id + "' is used twice",
                               "custom_id");
            if (!j.contains("method") || j["method"] != "POST")
                throw ApiError(400, "invalid_request_error", "method must be \"POST\"", "method");
            Endpoint ep;
            if (j.contains("url") && j["url"] == "/v1/chat/completions") {
                ep = Endpoint::chat_completions;
            } else if (j.contains("url") && j["url"] == "/v1/completions") {
                ep = Endpoint::completions;
            } else {
                throw ApiError(400, "invalid_request_error",
                               "url must be \"/v1/chat/completions\" or \"/v1/completions\"", "url");
            }
            if (!j.contains("body") || !j["body"].is_object())
                throw ApiError(400, "invalid_request_error", "body must be a JSON object", "body");
            if (j["body"].contains("stream") && j["body"]["stream"] == true)
                throw ApiError(400, "invalid_request_error", "a batch request must not set stream: true",
                               "body.stream");
            r.lines.push_back({n, custom_id, parse_request(ep, j["body"], ctx)});
        } catch (const ApiError& e) {
            r.errors.push_back({n, custom_id, e});
        }
    }
    return r;
}

BatchSummary run_batch(Engine& engine, const tok::Tokenizer& tok, const ChatTemplate* chat_template,
                       const BatchOptions& o) {
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t created_at = int64_t(std::time(nullptr));
    SLUICE_CHECK(fs::exists(o.input_path), o.input_path, ": no such file");
    SLUICE_CHECK(!o.output_path.empty(), "batch: no output file given");
    const std::string error_path = o.error_path.empty() ? with_suffix(o.output_path, ".errors.jsonl") : o.error_path;
    const std::string status_path = o.status_path.empty() ? with_suffix(o.output_path, ".status.json") : o.status_path;
    std::error_code ec;
    for (const auto& p : {o.output_path, error_path, status_path})
        SLUICE_CHECK(!fs::equivalent(o.input_path, p, ec), p, ": is the input file; choose another output path");

    BatchSummary sum;
    ModelContext ctx = make_model_context(engine, tok, chat_template, o.model_id, o.default_max_tokens);
    ctx.speculative_tokens = o.speculative_tokens;
    BatchInput input;
    {
        std::ifstream in(o.input_path, std::ios::binary);
        SLUICE_CHECK(in, o.input_path, ": cannot read");
        input = parse_batch_input(in, ctx);
    }
    const std::vector<BatchLine>& lines = input.lines;
    std::vector<nlohmann::ordered_json> invalid;  // error-file lines for invalid input lines (continue_on_invalid)
    json errors_data = json::array();
    for (const BatchLineError& b : input.errors) {
        const ApiError& e = b.error;
        const std::string where = e.param.empty() ? "" : " (" + e.param + ")";
        sum.validation_errors.push_back("line " + std::to_string(b.line_no) + ": " + e.what() + where);
        errors_data.push_back({{"code", e.code.empty() ? "invalid_request" : e.code},
                               {"message", e.what()},
                               {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                               {"line", b.line_no}});
        if (!b.custom_id.empty()) {
            invalid.push_back(result_line(b.custom_id, e.status, error_json(e)));
        } else {
            invalid.push_back(
                {{"id", "batch_req_" + random_hex(24)},
                 {"custom_id", nullptr},
                 {"response", nullptr},
                 {"error",
                  {{"code", "invalid_request"}, {"message", "line " + std::to_string(b.line_no) + ": " + e.what()}}}});
        }
    }
    sum.total = int64_t(lines.size() + invalid.size());

    json status = {{"id", "batch_" + random_hex(24)},
                   {"object", "batch"},
                   {"endpoint", lines.empty() ? "/v1/chat/completions"
                                              : lines[0].request.endpoint == Endpoint::completions
                                                    ? "/v1/completions"
                                                    : "/v1/chat/completions"},
                   {"input_file", o.input_path},
                   {"output_file", o.output_path},
                   {"error_file", error_path},
                   {"input_xxh3", file_xxh3(o.input_path)},
                   {"completion_window", "24h"},
                   {"created_at", created_at},
                   {"errors", nullptr}};
    Earlier done_before, failed_before;  // of earlier runs, when resuming: the status counts the whole job
    auto write_status = [&](const std::string& state) {
        status["status"] = state;
        const int64_t in = sum.input_tokens + done_before.input_tokens + failed_before.input_tokens;
        const int64_t out = sum.output_tokens + done_before.output_tokens + failed_before.output_tokens;
        status["request_counts"] = {{"total", sum.total},
                                    {"completed", sum.completed + done_before.lines},
                                    {"failed", sum.failed + failed_before.lines}};
        status["usage"] = {{"input_tokens", in}, {"output_tokens", out}, {"total_tokens", in + out}};
        if (!status.contains(state + "_at")) status[state + "_at"] = int64_t(std::time(nullptr));
        if (!errors_data.empty()) status["errors"] = {{"object", "list"}, {"data", errors_data}};
        const std::string tmp = status_path + ".tmp";
        {
            std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
            SLUICE_CHECK(f, tmp, ": cannot write the status file");
            f << status.dump(2) << "\n";
        }
        fs::rename(tmp, status_path);
    };

    if (!sum.validation_errors.empty() && !o.continue_on_invalid) {
        sum.status = "failed";
        write_status("failed");
        return sum;
    }

    std::set<std::string> done;
    if (o.resume && fs::exists(status_path) && fs::exists(o.output_path)) {
        // resuming: warn when the input is not the file the earlier run read (its custom_ids are still skipped)
        std::ifstream f(status_path, std::ios::binary);
        const json before = json::parse(f, nullptr, false);
        if (before.is_object() && before.contains("input_xxh3") && before["input_xxh3"] != status["input_xxh3"])
            std::fprintf(stderr, "batch: warning: %s changed since the run that wrote %s; requests whose custom_id "
                                 "is already answered there are skipped (--restart runs everything again)\n",
                         o.input_path.c_str(), o.output_path.c_str());
    }
    if (o.resume) {
        read_done_ids(o.output_path, done, done_before);
        read_done_ids(error_path, done, failed_before);
    } else {
        for (const auto& p : {o.output_path, error_path}) fs::remove(p, ec);
    }
    JsonlAppender out(o.output_path), err(error_path);
    for (auto& j : invalid) {
        if (j["custom_id"].is_string() && done.count(j["custom_id"].get<std::string>())) continue;
        err.write(j);
        ++sum.failed;
    }
    write_status("in_progress");

    struct InFlight {
        const BatchLine* line;
        std::unique_ptr<CompletionJob> job;
    };
    std::vector<InFlight> inflight;
    const size_t window = size_t(o.max_inflight > 0 ? o.max_inflight : 2 * engine.options().max_sequences);
    size_t next = 0;
    auto last_progress = t0, last_status = t0;
    const auto progress = [&](bool final) {
        const auto now = std::chrono::steady_clock::now();
        const double s = std::chrono::duration<double>(now - t0).count();
        if (!final && (o.progress_interval_s <= 0 || std::chrono::duration<double>(now - last_progress).count() <
                                                          o.progress_interval_s))
            return;
        last_progress = now;
        const int64_t finished = sum.completed + sum.failed + sum.skipped;
        const double rate = s > 0 ? double(sum.completed + sum.failed) / s : 0;
        const double eta = rate > 0 ? double(sum.total - finished) / rate : 0;
        if (o.progress_interval_s > 0 || final)
            std::fprintf(stderr, "batch: %lld/%lld done (%lld failed, %lld from before), %.1f generated tok/s, %.0f s%s\n",
                         (long long)finished, (long long)sum.total, (long long)sum.failed, (long long)sum.skipped,
                         s > 0 ? double(sum.output_tokens) / s : 0.0, final ? s : eta, final ? " elapsed" : " left");
        if (std::chrono::duration<double>(now - last_status).count() > 5) {
            last_status = now;
            write_status("in_progress");
        }
    };
    bool cancelled = false;
    while (true) {
        cancelled = cancelled || (o.cancel && o.cancel->load());
        while (!cancelled && inflight.size() < window && next < lines.size()) {
            const BatchLine& l = lines[next++];
            if (done.count(l.custom_id)) {
                ++sum.skipped;
                continue;
            }
            try {
                inflight.push_back({&l, std::make_unique<CompletionJob>(engine, tok, l.request)});
            } catch (const Error& e) {
                err.write(result_line(l.custom_id, 400, error_json(ApiError(400, "invalid_request_error", e.what()))));
                ++sum.failed;
            }
        }
        if (cancelled) {
            for (auto& f : inflight) f.job->cancel();
            engine.run_until_idle();
            break;
        }
        if (inflight.empty() && next >= lines.size()) break;
        engine.step();
        for (size_t i = 0; i < inflight.size();) {
            if (!inflight[i].job->finished()) {
                ++i;
                continue;
            }
            CompletionJob& job = *inflight[i].job;
            const std::string& cid = inflight[i].line->custom_id;
            try {
                json body = job.wait_result(std::chrono::steady_clock::now() + std::chrono::seconds(1));
                out.write(result_line(cid, 200, body));
                ++sum.completed;
                const Usage u = job.usage();
                sum.input_tokens += u.prompt_tokens;
                sum.output_tokens += u.completion_tokens;
            } catch (const ApiError& e) {
                err.write(result_line(cid, e.status, error_json(e)));
                ++sum.failed;
            }
            inflight.erase(inflight.begin() + std::ptrdiff_t(i));
        }
        progress(false);
    }
    out.sync();
    err.sync();
    sum.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sum.status = cancelled ? "cancelled" : "completed";
    write_status(sum.status);
    progress(true);
    return sum;
}

}  // namespace sluice::api
