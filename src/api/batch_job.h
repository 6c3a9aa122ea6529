// Overnight batch jobs in the OpenAI Batch file format: an input JSONL of
//   {"custom_id", "method": "POST", "url": "/v1/chat/completions" | "/v1/completions", "body": {...}}
// lines becomes an output JSONL of {"id", "custom_id", "response": {"status_code", "request_id", "body"},
// "error"} lines (successes) and an error JSONL (failures: 4xx/5xx bodies in the OpenAI error envelope), plus a
// status file shaped like the Batch object.
//
// Unlike `vllm run-batch`: the whole input is validated first and every problem is reported with its line number
// (or, with continue_on_invalid, written to the error file while the rest runs); results are appended as each
// request finishes and flushed, so an interrupted job resumes where it stopped (custom_ids already in the output
// or error file are skipped); a failing request never stops the others. All requests share the engine's batches:
// with P sequences running at once each routed expert is read once for up to P rows. The input is read twice,
// streaming (validation, then the run), so a file of any number of lines runs in bounded memory: the requests in
// flight, the errors, and 16 bytes (plus a hash-set node) per custom_id for the duplicate check and the resume.
#pragma once

#include <atomic>
#include <cstdint>
#include <istream>
#include <optional>
#include <functional>
#include <string>
#include <vector>

#include "api/batch_files.h"
#include "api/batch_shard.h"
#include "api/openai_protocol.h"
#include "runtime/engine.h"

namespace sluice::api {

struct BatchOptions {
    std::string input_path, output_path;
    std::string error_path;       // empty: OUTPUT with .errors.jsonl in place of .jsonl
    std::string status_path;      // empty: OUTPUT with .status.json
    std::string model_id;
    int64_t default_max_tokens = 1024;  // completion tokens when a request sets no limit
    int64_t speculative_tokens = 0;     // > 0: requests draft this many tokens per step
    std::function<Drafter()> make_drafter;  // set: each request's drafter (a draft model's), else prompt lookup
    bool draft_gate = true;                 // RequestParams::draft_gate for every drafting request
    double draft_bytes_per_token = 0;       // the drafter's bytes per drafted token (a draft model's pass)
    bool continue_on_invalid = false;   // invalid lines go to the error file instead of failing the job
    bool resume = true;                 // skip custom_ids already in the output or error file
    int64_t max_inflight = 0;           // requests submitted to the engine at once (0: 2 x the engine's sequences)
    double progress_interval_s = 5;     // stderr progress lines (0: none)
    double status_interval_s = 5;       // the status file is rewritten this often while the job runs
    const std::atomic<bool>* cancel = nullptr;  // set -> stop submitting, cancel what runs, status "cancelled"
    ShardSpec shard;                    // run only the lines of this shard (api/batch_shard); 0/1: all
};

struct BatchSummary {
    std::string status;  // completed, failed (validation), cancelled
    int64_t total = 0, completed = 0, failed = 0, skipped = 0;  // skipped: already done before a resume
    int64_t input_tokens = 0, output_tokens = 0;
    double elapsed_s = 0;
    std::vector<std::string> validation_errors;  // "line N: message"
};

struct BatchLine {
    int64_t line_no = 0;  // 1-based
    std::string custom_id;
    ParsedRequest request;
};
struct BatchLineError {
    int64_t line_no = 0;
    std::string custom_id;  // empty when the line has none (not JSON, ...)
    ApiError error;
};

// One line's envelope and body: a JSON object with a non-empty custom_id (set in `custom_id` as soon as it is
// read), method POST, a supported url, an object body without stream: true, and the body itself (parse_request).
// Throws ApiError naming the field. Duplicate custom_ids are the caller's to find.
ParsedRequest parse_batch_line(const std::string& text, const ModelContext& ctx, std::string& custom_id);
// The same, but nullopt without parsing the body when the custom_id is not in shard `only`.
std::optional<ParsedRequest> parse_batch_line(const std::string& text, const ModelContext& ctx,
                                              std::string& custom_id, const ShardSpec& only);

// The first pass: every line validated, none kept. Blank lines are skipped; a custom_id seen on an earlier line
// makes the line invalid. Memory: the errors plus one IdKey per custom_id.
struct BatchValidation {
    std::vector<BatchLineError> errors;  // every invalid line, in order
    int64_t valid = 0, valid_in_shard = 0;
    Endpoint first_endpoint = Endpoint::chat_completions;  // of the first valid line
};
BatchValidation validate_batch_input(std::istream& in, const ModelContext& ctx, const ShardSpec& shard = {});
// Which shard writes an invalid line to its error file: its custom_id's, or shard 0 for a line without one.
bool in_shard(const BatchLineError& e, const ShardSpec& shard);

// The second pass: the valid lines of `shard`, parsed again one at a time (lines listed in `invalid`, ascending,
// are skipped). Throws Error when a line that passed validation no longer does (the file changed).
class BatchLineSource {
public:
    BatchLineSource(std::istream& in, const ModelContext& ctx, std::vector<int64_t> invalid, const ShardSpec& shard);
    bool next(BatchLine& out);

private:
    LineReader reader_;
    const ModelContext& ctx_;
    std::vector<int64_t> invalid_;
    size_t next_invalid_ = 0;
    ShardSpec shard_;
};

struct BatchInput {
    std::vector<BatchLine> lines;        // the valid ones
    std::vector<BatchLineError> errors;  // every invalid line, in order
};
// Both passes over a small input held in memory (tests, fuzzing); run_batch streams the file instead.
BatchInput parse_batch_input(std::istream& in, const ModelContext& ctx);

// Runs the job; the engine must not be running on another thread. Throws Error for what stops the job as a
// whole (unreadable input, output path equal to the input, a corrupt output file to resume from).
BatchSummary run_batch(Engine& engine, const tok::Tokenizer& tok, const ChatTemplate* chat_template,
                       const BatchOptions& options);

}  // namespace sluice::api
