#include "api/batch_job.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include "api/completion_job.h"
#include "api/openai_protocol.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace sluice::api {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// What earlier runs of a resumed job left: lines and the usage their responses report.
struct Earlier {
    int64_t lines = 0, input_tokens = 0, output_tokens = 0;
};

// The custom_ids already answered in a results file, read a line at a time; an unterminated last line (a crash
// mid-write) is cut off.
void read_done_ids(const std::string& path, IdSet& done, Earlier& earlier) {
    if (!fs::exists(path)) return;
    uint64_t keep = 0;
    {
        LineReader r(path);
        while (r.next()) {
            if (!r.terminated()) break;
            keep = r.end();
            if (r.text().empty()) continue;
            json j = json::parse(r.text(), nullptr, false);
            SLUICE_CHECK(!j.is_discarded() && j.is_object() && j.contains("custom_id") && j["custom_id"].is_string(),
                         path, ":", r.line_no(),
                         ": not a batch result line (remove the file or choose another output to start over)");
            if (!done.insert(id_key(j["custom_id"].get<std::string>())).second) continue;
            ++earlier.lines;
            const json* u = nullptr;
            if (auto re = j.find("response"); re != j.end() && re->is_object())
                if (auto b = re->find("body"); b != re->end() && b->is_object())
                    if (auto it = b->find("usage"); it != b->end() && it->is_object()) u = &*it;
            if (u) {
                earlier.input_tokens += u->value("prompt_tokens", int64_t(0));
                earlier.output_tokens += u->value("completion_tokens", int64_t(0));
            }
        }
    }
    if (keep != fs::file_size(path)) fs::resize_file(path, keep);
}

// OpenAI's output line, keys in the documented order.
nlohmann::ordered_json result_line(const std::string& custom_id, int status, const json& body) {
    return {{"id", "batch_req_" + random_hex(24)},
            {"custom_id", custom_id},
            {"response", {{"status_code", status}, {"request_id", "req_" + random_hex(24)}, {"body", body}}},
            {"error", nullptr}};
}

}  // namespace

ParsedRequest parse_batch_line(const std::string& text, const ModelContext& ctx, std::string& custom_id) {
    return *parse_batch_line(text, ctx, custom_id, ShardSpec{});
}

std::optional<ParsedRequest> parse_batch_line(const std::string& text, const ModelContext& ctx,
                                              std::string& custom_id, const ShardSpec& only) {
    // ordered_json keeps the body's key order (tool schemas reach the chat template as written)
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw ApiError(400, "invalid_request_error", "not a JSON object");
    if (!j.contains("custom_id") || !j["custom_id"].is_string() || j["custom_id"].get<std::string>().empty())
        throw ApiError(400, "invalid_request_error", "custom_id must be a non-empty string", "custom_id");
    custom_id = j["custom_id"].get<std::string>();
    if (!only.whole() && shard_of(custom_id, only.count) != only.index) return std::nullopt;
    if (!j.contains("method") || j["method"] != "POST")
        throw ApiError(400, "invalid_request_error", "method must be \"POST\"", "method");
    Endpoint ep;
    if (j.contains("url") && j["url"] == "/v1/chat/completions") {
        ep = Endpoint::chat_completions;
    } else if (j.contains("url") && j["url"] == "/v1/completions") {
        ep = Endpoint::completions;
    } else {
        throw ApiError(400, "invalid_request_error", "url must be \"/v1/chat/completions\" or \"/v1/completions\"",
                       "url");
    }
    if (!j.contains("body") || !j["body"].is_object())
        throw ApiError(400, "invalid_request_error", "body must be a JSON object", "body");
    if (j["body"].contains("stream") && j["body"]["stream"] == true)
        throw ApiError(400, "invalid_request_error", "a batch request must not set stream: true", "body.stream");
    return parse_request(ep, j["body"], ctx);
}

BatchValidation validate_batch_input(std::istream& in, const ModelContext& ctx, const ShardSpec& shard) {
    BatchValidation v;
    IdSet ids;
    LineReader r(in);
    while (r.next()) {
        if (r.blank()) continue;
        std::string custom_id;
        std::optional<ApiError> error;
        Endpoint endpoint = Endpoint::chat_completions;
        try {
            endpoint = parse_batch_line(r.text(), ctx, custom_id).endpoint;
        } catch (const ApiError& e) {
            error = e;
        }
        // an earlier line's custom_id, whether that line was valid or not, makes this one a duplicate
        if (!custom_id.empty() && !ids.insert(id_key(custom_id)).second)
            error = ApiError(400, "invalid_request_error", "custom_id '" + custom_id + "' is used twice", "custom_id");
        if (error) {
            v.errors.push_back({r.line_no(), custom_id, *error});
            continue;
        }
        if (v.valid++ == 0) v.first_endpoint = endpoint;
        if (shard.whole() || shard_of(custom_id, shard.count) == shard.index) ++v.valid_in_shard;
    }
    return v;
}

bool in_shard(const BatchLineError& e, const ShardSpec& shard) {
    if (shard.whole()) return true;
    return e.custom_id.empty() ? shard.index == 0 : shard_of(e.custom_id, shard.count) == shard.index;
}

BatchLineSource::BatchLineSource(std::istream& in, const ModelContext& ctx, std::vector<int64_t> invalid,
                                 const ShardSpec& shard)
    : reader_(in), ctx_(ctx), invalid_(std::move(invalid)), shard_(shard) {}

bool BatchLineSource::next(BatchLine& out) {
    while (reader_.next()) {
        const int64_t n = reader_.line_no();
        while (next_invalid_ < invalid_.size() && invalid_[next_invalid_] < n) ++next_invalid_;
        if (reader_.blank() || (next_invalid_ < invalid_.size() && invalid_[next_invalid_] == n)) continue;
        std::string custom_id;
        try {
            std::optional<ParsedRequest> req = parse_batch_line(reader_.text(), ctx_, custom_id, shard_);
            if (!req) continue;  // another shard's line
            out = {n, std::move(custom_id), std::move(*req)};
            return true;
        } catch (const ApiError& e) {
            fail("line ", n, ": ", e.what(), " (the input changed after it was validated)");
        }
    }
    return false;
}

BatchInput parse_batch_input(std::istream& in, const ModelContext& ctx) {
    std::stringstream text;
    text << in.rdbuf();
    BatchValidation v = validate_batch_input(text, ctx);
    std::vector<int64_t> invalid;
    for (const auto& e : v.errors) invalid.push_back(e.line_no);
    text.clear();
    text.seekg(0);
    BatchInput r;
    BatchLineSource src(text, ctx, std::move(invalid), {});
    for (BatchLine l; src.next(l);) r.lines.push_back(std::move(l));
    r.errors = std::move(v.errors);
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
    for (const auto& p : {o.output_path, error_path, status_path}) {
        SLUICE_CHECK(!fs::equivalent(o.input_path, p, ec), p, ": is the input file; choose another output path");
        create_parent_dirs(p);  // -o shards/3/results.jsonl: one folder per shard
    }

    BatchSummary sum;
    ModelContext ctx = make_model_context(engine, tok, chat_template, o.model_id, o.default_max_tokens);
    ctx.speculative_tokens = o.speculative_tokens;
    ctx.make_drafter = o.make_drafter;
    ctx.draft_gate = o.draft_gate;
    ctx.draft_bytes_per_token = o.draft_bytes_per_token;
    BatchValidation input;
    {
        std::ifstream in(o.input_path, std::ios::binary);
        SLUICE_CHECK(in, o.input_path, ": cannot read");
        input = validate_batch_input(in, ctx, o.shard);
    }
    // error-file lines for this shard's invalid input lines (continue_on_invalid); the status lists those, or
    // every bad line of the file when validation stops the job
    std::vector<nlohmann::ordered_json> invalid;
    json errors_data = json::array(), shard_errors_data = json::array();
    std::vector<int64_t> invalid_lines;
    for (const BatchLineError& b : input.errors) {
        const ApiError& e = b.error;
        invalid_lines.push_back(b.line_no);
        const std::string where = e.param.empty() ? "" : " (" + e.param + ")";
        sum.validation_errors.push_back("line " + std::to_string(b.line_no) + ": " + e.what() + where);
        const json data = {{"code", e.code.empty() ? "invalid_request" : e.code},
                           {"message", e.what()},
                           {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                           {"line", b.line_no}};
        errors_data.push_back(data);
        if (!in_shard(b, o.shard)) continue;
        shard_errors_data.push_back(data);
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
    if (o.continue_on_invalid) errors_data = std::move(shard_errors_data);
    sum.total = input.valid_in_shard + int64_t(invalid.size());

    json status = {{"id", "batch_" + random_hex(24)},
                   {"object", "batch"},
                   {"endpoint", input.first_endpoint == Endpoint::completions ? "/v1/completions"
                                                                              : "/v1/chat/completions"},
                   {"input_file", o.input_path},
                   {"output_file", o.output_path},
                   {"error_file", error_path},
                   {"input_xxh3", file_xxh3(o.input_path)},
                   {"completion_window", "24h"},
                   {"created_at", created_at},
                   {"errors", nullptr}};
    if (!o.shard.whole()) status["shard"] = {{"index", o.shard.index}, {"count", o.shard.count}};
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
        write_file_atomically(status_path, status.dump(2) + "\n");
    };

    if (!sum.validation_errors.empty() && !o.continue_on_invalid) {
        sum.status = "failed";
        write_status("failed");
        return sum;
    }

    IdSet done;
    if (o.resume && fs::exists(status_path) && fs::exists(o.output_path)) {
        // resuming: warn when the input is not the file the earlier run read (its custom_ids are still skipped)
        std::ifstream f(status_path, std::ios::binary);
        const json before = json::parse(f, nullptr, false);
        const json shard_before = before.is_object() && before.contains("shard") ? before["shard"] : json(nullptr);
        const json shard_now = status.contains("shard") ? status["shard"] : json(nullptr);
        const auto spec = [](const json& sh) {
            return sh.is_object() ? "shard " + sh.value("index", json()).dump() + "/" + sh.value("count", json()).dump()
                                  : std::string("the whole input (no --shard)");
        };
        SLUICE_CHECK(!before.is_object() || shard_before == shard_now, o.output_path, " holds the results of ",
                     spec(shard_before), ", not of ", spec(shard_now),
                     "; choose another output, or --restart to start it over");
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
        if (j["custom_id"].is_string() && done.count(id_key(j["custom_id"].get<std::string>()))) continue;
        err.write(j);
        ++sum.failed;
    }
    write_status("in_progress");

    struct InFlight {
        std::string custom_id;
        std::unique_ptr<CompletionJob> job;
    };
    std::ifstream in(o.input_path, std::ios::binary);
    SLUICE_CHECK(in, o.input_path, ": cannot read");
    BatchLineSource source(in, ctx, std::move(invalid_lines), o.shard);
    bool more = true;  // the source has lines left
    std::vector<InFlight> inflight;
    const size_t window = size_t(o.max_inflight > 0 ? o.max_inflight : 2 * engine.options().max_sequences);
    auto last_progress = t0, last_status = t0;
    // refreshes the status file during the run (never after the final one: a job ended "completed" must stay so)
    // and prints a progress line every progress_interval_s, and one at the end
    const auto progress = [&](bool final) {
        const auto now = std::chrono::steady_clock::now();
        const double s = std::chrono::duration<double>(now - t0).count();
        if (!final && std::chrono::duration<double>(now - last_status).count() >= o.status_interval_s) {
            last_status = now;
            write_status("in_progress");
        }
        if (!final && (o.progress_interval_s <= 0 || std::chrono::duration<double>(now - last_progress).count() <
                                                          o.progress_interval_s))
            return;
        last_progress = now;
        const int64_t finished = sum.completed + sum.failed + sum.skipped;
        const double rate = s > 0 ? double(sum.completed + sum.failed) / s : 0;
        const double eta = rate > 0 ? double(sum.total - finished) / rate : 0;
        std::fprintf(stderr, "batch: %lld/%lld done (%lld failed, %lld from before), %.1f generated tok/s, %.0f s%s\n",
                     (long long)finished, (long long)sum.total, (long long)sum.failed, (long long)sum.skipped,
                     s > 0 ? double(sum.output_tokens) / s : 0.0, final ? s : eta, final ? " elapsed" : " left");
    };
    bool cancelled = false;
    while (true) {
        cancelled = cancelled || (o.cancel && o.cancel->load());
        while (!cancelled && inflight.size() < window && more) {
            BatchLine l;
            if (!(more = source.next(l))) break;
            if (done.count(id_key(l.custom_id))) {
                ++sum.skipped;
                continue;
            }
            try {
                inflight.push_back({l.custom_id, std::make_unique<CompletionJob>(engine, tok, std::move(l.request))});
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
        if (inflight.empty() && !more) break;
        engine.step();
        for (size_t i = 0; i < inflight.size();) {
            if (!inflight[i].job->finished()) {
                ++i;
                continue;
            }
            CompletionJob& job = *inflight[i].job;
            const std::string& cid = inflight[i].custom_id;
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
