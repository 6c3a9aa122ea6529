// The OpenAI-compatible HTTP server: /v1/chat/completions and /v1/completions (streamed as server-sent events or
// whole), /v1/models, /health, /tokenize, /detokenize, /metrics (Prometheus text: queue, tokens, forward passes,
// expert reads, HTTP responses). Every request is validated completely before any header is
// sent (api/openai_protocol); generation runs on one engine thread that batches all requests in flight
// (runtime/engine), so concurrent clients share each expert read.
//
// Safe defaults: binds 127.0.0.1 and then answers only requests whose Host is a loopback name (DNS rebinding); with
// API keys set every route but /health needs `Authorization: Bearer KEY` (or
// `X-Api-Key`); request bodies are capped for every transfer encoding, headers and bodies have deadlines, open
// connections are capped apart from the threads that answer (api/http/server.h); streams send `: ping` comments
// while the first token is slow (experts stream from SSD); a client that goes away cancels its request, streamed
// or not, within CompletionJob::kAbortPollMs. stop() drains: no new connections, requests in progress may finish
// for drain_timeout_s, then streams end with an error event and [DONE] and waiting requests get 503.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "api/openai_protocol.h"
#include "runtime/engine.h"

namespace sluice::api {

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8080;                    // 0: any free port (port() tells which)
    std::vector<std::string> api_keys;  // empty: no authentication
    std::string model_id;               // reported by /v1/models and echoed when a request names none
    int64_t default_max_tokens = 2048;  // completion tokens when a request gives no limit
    int64_t speculative_tokens = 0;     // > 0: requests draft this many tokens per step
    std::function<Drafter()> make_drafter;  // set: each request's drafter (a draft model's), else prompt lookup
    bool draft_gate = true;                 // RequestParams::draft_gate for every drafting request
    double draft_bytes_per_token = 0;       // the drafter's bytes per drafted token (a draft model's pass)
    int64_t request_timeout_s = 3600;   // a request still running after this is cancelled
    int64_t ping_interval_s = 15;       // SSE keep-alive comment while nothing else is sent
    int64_t max_waiting = 256;          // requests queued beyond the running ones; more get 503
    uint64_t max_body_bytes = 16u << 20;  // for every transfer encoding (api/http/request_parser.h)
    int http_threads = 64;                 // requests handled at once (GETs have threads of their own)
    int max_connections = 512;             // open connections; one more is answered 503
    int64_t header_timeout_s = 10;         // a request's line and headers must arrive within this (else 408)
    int64_t body_timeout_s = 60;           // and its body within this after the headers
    double drain_timeout_s = 20;           // stop(): requests in progress may finish for this long
    // Browser origins (scheme://host[:port]) whose pages may call the API, "*" for any; empty: no CORS headers,
    // so browsers refuse cross-origin calls. Preflight OPTIONS requests are answered without an API key.
    std::vector<std::string> cors_origins;
};

// "*" or scheme://host[:port] with nothing after it (what a browser sends as Origin); false otherwise.
bool valid_cors_origin(const std::string& origin);

class Server {
  public:
    // chat_template may be null (chat completions then answer 400).
    Server(Engine& engine, const tok::Tokenizer& tokenizer, const ChatTemplate* chat_template, ServerOptions options);
    ~Server();

    // Binds the address; throws Error naming it when that fails (port taken, bad host).
    void bind();
    int port() const { return port_; }
    // Starts the engine thread and serves until stop() (from another thread or a signal handler's watcher) and
    // its drain are done.
    void serve();
    void stop();  // thread-safe; may come before serve()

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
    int port_ = 0;
};

}  // namespace sluice::api
