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
// with P sequences running at once each routed expert is read once for up to P rows.
#pragma once

#include <atomic>
#include <cstdint>
#include <istream>
#include <string>
#include <vector>

#include "api/openai_protocol.h"
#include "runtime/engine.h"

namespace sluice {
class ChatTemplate;
namespace tok {
class Tokenizer;
}
}  // namespace sluice

namespace sluice::api {

struct BatchOptions {
    std::string input_path, output_path;
    std::string error_path;       // empty: OUTPUT with .errors.jsonl in place of .jsonl
    std::string status_path;      // empty: OUTPUT with .status.json
    std::string model_id;
    int64_t default_max_tokens = 1024;  // completion tokens when a request sets no limit
    int64_t speculative_tokens = 0;     // > 0: greedy requests draft this many tokens per step (prompt lookup)
    bool continue_on_invalid = false;   // invalid lines go to the error file instead of failing the job
    bool resume = true;                 // skip custom_ids already in the output or error file
    int64_t max_inflight = 0;           // requests submitted to the engine at once (0: 2 x the engine's sequences)
    double progress_interval_s = 5;     // stderr progress lines (0: none)
    const std::atomic<bool>* cancel = nullptr;  // set -> stop submitting, cancel what runs, status "cancelled"
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
struct BatchInput {
    std::vector<BatchLine> lines;        // the valid ones
    std::vector<BatchLineError> errors;  // every invalid line, in order
};
// Validates every line of a Batch input file (blank lines are skipped): JSON object, non-empty unique custom_id,
// method POST, a supported url, an object body without stream: true, and the body itself (parse_request).
BatchInput parse_batch_input(std::istream& in, const ModelContext& ctx);

// Runs the job; the engine must not be running on another thread. Throws Error for what stops the job as a
// whole (unreadable input, output path equal to the input, a corrupt output file to resume from).
BatchSummary run_batch(Engine& engine, const tok::Tokenizer& tok, const ChatTemplate* chat_template,
                       const BatchOptions& options);

}  // namespace sluice::api
