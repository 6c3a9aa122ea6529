// One OpenAI request in flight: its choices (n for each prompt) submitted to the engine at once, so their prefills
// (and, under echo with logprobs, their prompt scoring) share forward passes; each choice's tokens turned into text on
// the engine thread (incremental UTF-8, stop sequences, logprobs) and queued for the thread that answers the client
// (the HTTP server's handler, or the batch runner). A choice that meets a stop sequence is dropped from the engine at
// once. Destroying the job cancels whatever of it is still queued or running.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "api/openai_protocol.h"
#include "runtime/engine.h"

namespace sluice::api {

// What one choice produced since the last wait(): text safe to send, the logprob entries of its tokens, and on the
// choice's last delta its finish reason ("stop", "length") or an error message.
struct ChoiceDelta {
    int index = 0;
    std::string text;
    nlohmann::json logprobs = nlohmann::json::array();  // entries in the endpoint's shape, one per token
    std::string finish_reason;                          // empty until the choice ends
    std::string error;                                  // the engine failed this choice (I/O error, ...)
    size_t text_offset = 0;  // where `text` starts in the choice's whole text (completions logprobs text_offset)
    // parse_tools: `text` is the content as the output's tool calls are parsed (tool_stream.h), and these the
    // calls' deltas (a call's first with its id and name, then fragments of its arguments as they are generated);
    // finish_reason "tool_calls" when the choice wrote calls and closed the last one
    std::vector<CallDelta> tool_calls;
};

// The model facts request parsing needs, from the engine's model and options: the context one request may use is the
// engine's token budget, capped by the model's positions.
ModelContext make_model_context(Engine& engine, const tok::Tokenizer& tok, const ChatTemplate* chat_template,
                                std::string model_id, int64_t default_max_tokens);

class CompletionJob {
public:
    // Submits every choice; throws Error when the engine refuses the request (it names why).
    CompletionJob(Engine& engine, const tok::Tokenizer& tok, ParsedRequest req);
    ~CompletionJob();
    CompletionJob(const CompletionJob&) = delete;
    CompletionJob& operator=(const CompletionJob&) = delete;

    // Moves the deltas queued so far into out (merged per choice, in order); waits up to `timeout` for the first.
    // Returns false when nothing arrived in time.
    bool wait(std::vector<ChoiceDelta>& out, std::chrono::milliseconds timeout);
    // Every choice has ended and its deltas have been taken.
    bool done() const;
    // Every choice has ended (its deltas may still be queued: wait_result() then returns at once).
    bool finished() const;
    // Stops every choice still queued or running (the client went away, or a deadline passed).
    void cancel();

    // Waits until every choice has ended (or the deadline passes: the job is then cancelled and ApiError 504
    // thrown) and returns the non-streaming response body. A choice the engine failed throws ApiError 500.
    // `abort` is asked every kAbortPollMs; an error it returns cancels the job and is thrown (the client went
    // away, the server is shutting down).
    nlohmann::json wait_result(std::chrono::steady_clock::time_point deadline,
                               const std::function<std::optional<ApiError>()>& abort = {});
    // A flag read (Exchange::client_gone is an atomic): polling it often costs nothing, and at 200 ms a whole
    // 900-token prefill of the shipped model (~180 ms here) finished before its client's hang-up was seen.
    static constexpr int64_t kAbortPollMs = 20;

    Usage usage() const;
    const ParsedRequest& request() const { return req_; }
    const std::string& id() const { return id_; }
    int64_t created() const { return created_; }

    struct Shared;  // the queue the engine thread's callbacks fill (completion_job.cpp)

private:
    Engine& engine_;
    ParsedRequest req_;
    std::string id_;
    int64_t created_ = 0;
    std::shared_ptr<Shared> shared_;
    std::vector<uint64_t> engine_ids_;
};

}  // namespace sluice::api
