#include "api/server.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <ctime>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

#include "api/completion_job.h"
#include "api/http/server.h"
#include "api/tokenizer_endpoints.h"
#include "core/error.h"
#include "core/log.h"
#include "ops/cuda/backend.h"
#include "ops/ops.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace sluice::api {

using nlohmann::json;

namespace {

void send_json(http::Exchange& ex, int status, const json& body) {
    ex.respond(status, "application/json", body.dump(-1, ' ', false, json::error_handler_t::replace));
}

void send_error(http::Exchange& ex, const ApiError& e) { send_json(ex, e.status, error_json(e)); }

// Constant-time comparison, so a wrong key's timing says nothing about the right one.
bool same_key(const std::string& a, const std::string& b) {
    if (a.size() != b.size()) return false;
    unsigned char diff = 0;
    for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
    return diff == 0;
}

// "[::1]:8080" -> "::1", "localhost:8080" -> "localhost".
std::string host_name(const std::string& host_header) {
    if (!host_header.empty() && host_header[0] == '[') {
        const size_t end = host_header.find(']');
        return end == std::string::npos ? host_header : host_header.substr(1, end - 1);
    }
    return host_header.substr(0, host_header.find(':'));
}

bool is_loopback(const std::string& host) {
    std::string h = host;
    for (auto& c : h) c = char(std::tolower(static_cast<unsigned char>(c)));
    return h == "localhost" || h == "::1" || h.rfind("127.", 0) == 0 || h == "localhost.";
}

std::string sse(const json& j) { return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n"; }

// ordered_json keeps the client's key order (tool schemas reach the chat template as written).
nlohmann::ordered_json parse_body(const http::Request& req) {
    nlohmann::ordered_json body = nlohmann::ordered_json::parse(req.body, nullptr, false);
    if (body.is_discarded()) throw ApiError(400, "invalid_request_error", "the request body is not valid JSON");
    if (!body.is_object()) throw ApiError(400, "invalid_request_error", "the request body must be a JSON object");
    return body;
}

}  // namespace

struct Server::Impl {
    Engine& engine;
    const tok::Tokenizer& tok;
    const ChatTemplate* chat_template;
    ServerOptions opt;
    ModelContext ctx;
    std::unique_ptr<http::Server> http;
    std::atomic<bool> stop_engine{false};
    std::thread engine_thread;
    int64_t started_unix_s = int64_t(std::time(nullptr));

    Impl(Engine& e, const tok::Tokenizer& t, const ChatTemplate* ct, ServerOptions o)
        : engine(e), tok(t), chat_template(ct), opt(std::move(o)) {
        ctx = make_model_context(engine, tok, chat_template, opt.model_id, opt.default_max_tokens);
        ctx.speculative_tokens = opt.speculative_tokens;
        ctx.make_drafter = opt.make_drafter;
        ctx.draft_gate = opt.draft_gate;
        ctx.draft_bytes_per_token = opt.draft_bytes_per_token;
        http::ServerOptions h;
        h.host = opt.host;
        h.port = opt.port;
        h.limits.max_body_bytes = opt.max_body_bytes;
        h.max_connections = opt.max_connections;
        h.max_handlers = std::max(2, opt.http_threads);
        h.header_timeout_ms = opt.header_timeout_s * 1000;
        h.body_timeout_ms = opt.body_timeout_s * 1000;
        h.error_body = [](int status, const std::string& message) {
            const char* type = status == 404 ? "not_found_error"
                               : status == 408 ? "timeout_error"
                               : status >= 500 ? "server_error"
                                               : "invalid_request_error";
            return std::pair<std::string, std::string>{
                "application/json", error_json(ApiError(status, type, message)).dump(-1, ' ', false,
                                                                                      json::error_handler_t::replace)};
        };
        h.on_response = [this](const std::string& path, int status) { count(path, status); };
        // GETs and preflights are cheap: they never wait behind completions for a thread
        http = std::make_unique<http::Server>(
            std::move(h), [this](http::Exchange& ex) { handle(ex); },
            [](const http::Request& r) { return r.method == "GET" || r.method == "OPTIONS"; });
    }

    // CORS: an allowed Origin gets Access-Control-Allow-Origin on whatever answers the request. True when the
    // request was a preflight, answered here: browsers send those without credentials, so they come before the
    // API key check.
    bool cors(http::Exchange& ex) const {
        const http::Request& req = ex.request();
        const std::string origin = req.header_or("origin");
        const bool any = std::find(opt.cors_origins.begin(), opt.cors_origins.end(), "*") != opt.cors_origins.end();
        const bool allowed = !origin.empty() && (any || std::find(opt.cors_origins.begin(), opt.cors_origins.end(),
                                                                  origin) != opt.cors_origins.end());
        if (allowed) {
            ex.add_header("Access-Control-Allow-Origin", any ? "*" : origin);
            if (!any) ex.add_header("Vary", "Origin");
        }
        if (req.method != "OPTIONS") return false;
        if (!allowed) {
            send_error(ex,
                       ApiError(403, "permission_error",
                                origin.empty() ? "OPTIONS is answered only as a CORS preflight (with Origin)"
                                               : "origin " + origin + " may not call this server (--cors-origin)"));
            return true;
        }
        ex.add_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        const std::string asked = req.header_or("access-control-request-headers");
        ex.add_header("Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type, X-Api-Key" : asked);
        ex.add_header("Access-Control-Max-Age", "600");
        ex.respond(204, "", "");
        return true;
    }

    // Host check, CORS, API key; then the route.
    void handle(http::Exchange& ex) {
        const http::Request& req = ex.request();
        // DNS rebinding: a page on evil.example that resolves to 127.0.0.1 reaches a loopback server with
        // Host: evil.example. A loopback server answers only to loopback names.
        if (const std::string* host = req.header("host"); is_loopback(opt.host) && host && !is_loopback(host_name(*host)))
            return send_error(ex, ApiError(403, "permission_error",
                                           "the Host header names another host; this server answers to localhost only"));
        if (cors(ex)) return;
        if (!opt.api_keys.empty() && req.path != "/health") {
            std::string key = req.header_or("x-api-key");
            const std::string auth = req.header_or("authorization");
            if (auth.rfind("Bearer ", 0) == 0) key = auth.substr(7);
            bool ok = false;
            for (const auto& k : opt.api_keys) ok = same_key(key, k) || ok;
            if (!ok)
                return send_error(ex, ApiError(401, "authentication_error",
                                               key.empty() ? "missing API key: send Authorization: Bearer KEY"
                                                           : "incorrect API key provided",
                                               "", "invalid_api_key"));
        }
        try {
            route(ex);
        } catch (const ApiError& e) {
            send_error(ex, e);
        } catch (const std::exception& e) {
            send_error(ex, ApiError(500, "server_error", e.what()));
        }
    }

    void route(http::Exchange& ex) {
        const http::Request& req = ex.request();
        const std::string& p = req.path;
        const bool get = req.method == "GET" || req.method == "HEAD", post = req.method == "POST";
        const bool get_route = p == "/metrics" || p == "/health" || p == "/v1/models" || p == "/tokenizer_info" ||
                               p.rfind("/v1/models/", 0) == 0;
        const bool post_route = p == "/v1/chat/completions" || p == "/v1/completions" || p == "/tokenize" ||
                                p == "/detokenize";
        if ((get_route && !get) || (post_route && !post)) {
            ex.add_header("Allow", get_route ? "GET, HEAD" : "POST");
            throw ApiError(405, "invalid_request_error", "method " + req.method + " is not allowed on " + p);
        }
        if (p == "/metrics") return ex.respond(200, "text/plain; version=0.0.4", metrics_text());
        if (p == "/health") return send_json(ex, 200, {{"status", "ok"}});
        if (p == "/v1/models") return send_json(ex, 200, models_json());
        if (p == "/tokenizer_info") return send_json(ex, 200, tokenizer_info_json(ctx));
        if (get_route) {
            const std::string id = p.substr(std::string("/v1/models/").size());
            if (id != opt.model_id)
                throw ApiError(404, "not_found_error", "the model '" + id + "' does not exist", "model",
                               "model_not_found");
            return send_json(ex, 200, models_json()["data"][0]);
        }
        if (p == "/v1/chat/completions") return completion(Endpoint::chat_completions, ex);
        if (p == "/v1/completions") return completion(Endpoint::completions, ex);
        if (p == "/tokenize") return tokenize(ex);
        if (p == "/detokenize") return detokenize(ex);
        throw ApiError(404, "not_found_error", "no such route: " + req.method + " " + p);
    }

    // HTTP responses by route and status, for /metrics (routes outside ours count as "other": no unbounded labels).
    std::mutex counts_mu;
    std::map<std::pair<std::string, int>, uint64_t> http_counts;
    void count(const std::string& path, int status) {
        static const char* known[] = {
            "/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics", "/tokenize", "/detokenize",
            "/tokenizer_info"};
        std::string route = "other";
        for (const char* k : known)
            if (path == k) route = k;
        if (path.rfind("/v1/models/", 0) == 0) route = "/v1/models/{id}";
        std::lock_guard lk(counts_mu);
        ++http_counts[{route, status}];
    }

    // Prometheus text format: engine queue and throughput counters, expert reads, HTTP responses.
    std::string metrics_text() {
        const EngineStats st = engine.stats();
        std::string out;
        auto metric = [&](const char* name, const char* type, const char* help, double value) {
            out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " +
                   std::to_string(value) + "\n";
        };
        metric("sluice_requests_running", "gauge", "Engine requests (choices) generating now.", double(st.running));
        metric("sluice_requests_waiting", "gauge", "Engine requests queued for admission.", double(st.waiting));
        metric("sluice_prompt_tokens_total", "counter", "Prompt tokens prefilled.", double(st.prompt_tokens));
        metric("sluice_prompt_tokens_cached_total", "counter", "Prompt tokens taken from the prefix cache.",
               double(st.cached_prompt_tokens));
        metric("sluice_prefix_cache_hits_total", "counter", "Requests that reused a cached prefix.",
               double(st.prefix_cache.hits));
        metric("sluice_prefix_cache_bytes", "gauge", "Bytes of states in the prefix cache.",
               double(st.prefix_cache.bytes));
        metric("sluice_prefix_cache_entries", "gauge", "States in the prefix cache.", double(st.prefix_cache.entries));
        metric("sluice_preemptions_total", "counter",
               "Running requests put back in the queue to make room in the context (recomputed later).",
               double(st.preemptions));
        metric("sluice_recomputed_tokens_total", "counter", "Rows run again for preempted requests.",
               double(st.recomputed_tokens));
        metric("sluice_draft_tokens_total", "counter", "Speculative draft tokens verified.", double(st.drafted));
        metric("sluice_draft_tokens_accepted_total", "counter", "Speculative draft tokens kept.", double(st.accepted));
        metric("sluice_draft_verify_steps_total", "counter", "Requests' decode steps that verified drafts.",
               double(st.verify_steps));
        metric("sluice_draft_gate_off_steps_total", "counter",
               "Requests' decode steps that drafted nothing because drafting did not pay (the gate).",
               double(st.gate_off_steps));
        metric("sluice_decode_passes_total", "counter", "Forward passes with at least one decode row.",
               double(st.decode_steps));
        metric("sluice_generation_tokens_total", "counter", "Tokens generated.", double(st.generated_tokens));
        metric("sluice_forward_passes_total", "counter", "Forward passes (engine steps) run.", double(st.steps));
        metric("sluice_forward_rows_total", "counter", "Token rows in all forward passes.", double(st.rows));
        metric("sluice_forward_seconds_total", "counter", "Time spent in forward passes.", st.forward_ms / 1000);
        metric("sluice_experts_requested_total", "counter", "Routed experts the forward passes needed.",
               double(st.experts_requested));
        metric("sluice_experts_read_total", "counter", "Routed experts read from SSD (cache misses and read-ahead).",
               double(st.experts_read));
        metric("sluice_expert_read_bytes_total", "counter", "Bytes of routed experts read from SSD.",
               double(st.expert_bytes_read));
        metric("sluice_expert_io_wait_seconds_total", "counter", "Time forward passes waited for expert reads.",
               st.io_wait_ms / 1000);
        if (ops::backend() == ops::Backend::Cuda) {  // --device cuda: weight matmuls and attention on the GPU
            const cuda::Stats g = cuda::stats();
            metric("sluice_cuda_matmuls_total", "counter", "Weight matmuls run on the GPU.", double(g.calls));
            metric("sluice_cuda_matmul_seconds_total", "counter",
                   "Time in GPU weight matmuls (copies up and down, kernels, waits).", g.busy_ms / 1000);
            metric("sluice_cuda_expert_groups_total", "counter",
                   "Groups of routed experts run on the GPU (one call each: gate/up, activation, down).",
                   double(g.group_calls));
            metric("sluice_cuda_expert_group_seconds_total", "counter",
                   "Time in GPU expert groups (copies up and down, kernels, waits).", g.group_ms / 1000);
            metric("sluice_cuda_attention_total", "counter", "Attention calls run on the GPU.", double(g.attention_calls));
            metric("sluice_cuda_attention_seconds_total", "counter",
                   "Time in GPU attention (keys, values and queries up, kernels, results down).", g.attention_ms / 1000);
            metric("sluice_cuda_h2d_bytes_total", "counter", "Bytes copied to the GPU (activations and weights).",
                   double(g.h2d_bytes));
            metric("sluice_cuda_weight_upload_bytes_total", "counter",
                   "Weight bytes copied to the GPU (streamed experts at every use, kept copies once).",
                   double(g.weight_upload_bytes));
            metric("sluice_cuda_d2h_bytes_total", "counter", "Bytes copied back from the GPU.", double(g.d2h_bytes));
            metric("sluice_cuda_weight_copy_hits_total", "counter", "Matmuls that reused a weight kept in VRAM.",
                   double(g.weight_hits));
            metric("sluice_cuda_weight_copy_bytes", "gauge", "Bytes of weights kept in VRAM.",
                   double(g.resident_weight_bytes));
        }
        out +=
            "# HELP sluice_http_responses_total HTTP responses by route and status.\n"
            "# TYPE sluice_http_responses_total counter\n";
        std::lock_guard lk(counts_mu);
        for (const auto& [key, n] : http_counts)
            out += "sluice_http_responses_total{route=\"" + key.first + "\",code=\"" + std::to_string(key.second) +
                   "\"} " + std::to_string(n) + "\n";
        return out;
    }

    json models_json() const {
        const ModelInfo& info = engine.model().info();
        json m = {{"id", opt.model_id},
                  {"object", "model"},
                  {"created", started_unix_s},
                  {"owned_by", "sluice"},
                  {"max_model_len", ctx.max_context_tokens},
                  {"meta",
                   {{"architecture", info.architecture},
                    {"vocab_size", info.vocab_size},
                    {"n_params", info.params_total},
                    {"n_ctx", ctx.max_context_tokens},
                    {"parallel", engine.options().max_sequences}}}};
        return {{"object", "list"}, {"data", json::array({m})}};
    }

    // Why a request in progress must end now: its client went away, or the server's drain deadline passed.
    std::optional<ApiError> abort_reason(const http::Exchange& ex) const {
        if (ex.client_gone()) return ApiError(499, "invalid_request_error", "the client closed the connection");
        if (ex.draining() && http::Clock::now() >= ex.drain_deadline())
            return ApiError(503, "server_error", "the server is shutting down; the request was cancelled");
        return std::nullopt;
    }

    void completion(Endpoint endpoint, http::Exchange& ex) {
        if (ex.draining()) throw ApiError(503, "server_error", "the server is shutting down");
        ParsedRequest parsed = parse_request(endpoint, parse_body(ex.request()), ctx);
        if (!parsed.ignored_fields.empty()) {
            std::string names;
            for (const auto& f : parsed.ignored_fields) names += (names.empty() ? "" : ", ") + f;
            log_info("ignored request fields: ", names);
        }
        if (engine.stats().waiting >= opt.max_waiting)
            throw ApiError(503, "server_error", "the server is busy: too many requests are waiting; retry later");
        std::shared_ptr<CompletionJob> job;
        try {
            job = std::make_shared<CompletionJob>(engine, tok, std::move(parsed));
        } catch (const Error& e) {
            throw ApiError(400, "invalid_request_error", e.what());
        }
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(opt.request_timeout_s);
        if (!job->request().stream)
            return send_json(ex, 200, job->wait_result(deadline, [&] { return abort_reason(ex); }));
        stream(*job, ex, deadline);
    }

    // Server-sent events: the first chunk goes out at once (headers committed, role announced), then deltas as they
    // come, `: ping` comments while nothing does, the usage chunk if asked, and [DONE]. An error after the headers
    // (a timeout, a failed generation, the server's drain deadline) is sent in-band as data: {"error": ...}, which
    // the openai client raises as APIError, followed by [DONE]. A client that goes away cancels the job.
    void stream(CompletionJob& job, http::Exchange& ex, std::chrono::steady_clock::time_point deadline) {
        const ParsedRequest& r = job.request();
        ex.add_header("Cache-Control", "no-cache");
        ex.add_header("X-Accel-Buffering", "no");
        const auto fail = [&](const ApiError& e) {
            job.cancel();
            ex.write(sse(error_json(e)));
            ex.write("data: [DONE]\n\n");
        };
        if (!ex.start_stream(200, "text/event-stream")) return job.cancel();
        if (r.endpoint == Endpoint::chat_completions)
            for (int i = 0; i < r.n; ++i)
                if (!ex.write(sse(chunk_json(r, job.id(), job.created(), i, "", "", true)))) return job.cancel();
        const auto ping = std::chrono::milliseconds(std::max<int64_t>(1, opt.ping_interval_s) * 1000);
        auto last_write = std::chrono::steady_clock::now();
        while (true) {
            if (job.done()) {
                if (r.include_usage) ex.write(sse(usage_chunk_json(r, job.id(), job.created(), job.usage())));
                ex.write("data: [DONE]\n\n");
                return;
            }
            const auto now = std::chrono::steady_clock::now();
            if (now > deadline) return fail(ApiError(504, "timeout_error", "the request did not finish in time"));
            if (std::optional<ApiError> why = abort_reason(ex)) {
                if (ex.client_gone()) return job.cancel();
                return fail(*why);
            }
            std::vector<ChoiceDelta> ds;
            if (!job.wait(ds, std::chrono::milliseconds(CompletionJob::kAbortPollMs))) {
                if (now - last_write >= ping) {
                    if (!ex.write(": ping\n\n")) return job.cancel();
                    last_write = now;
                }
                continue;
            }
            for (auto& d : ds) {
                if (!d.error.empty()) return fail(ApiError(500, "server_error", "generation failed: " + d.error));
                json lp = nullptr;
                if (r.logprobs) lp = logprobs_object(r, d.logprobs, d.text_offset);
                if (r.parse_tools) {  // content as it is certain, the calls' deltas as they come, then the finish
                    const bool has_lp = r.logprobs && !d.logprobs.empty();
                    if ((!d.text.empty() || has_lp) &&
                        !ex.write(sse(chunk_json(r, job.id(), job.created(), d.index, d.text, "", false, lp))))
                        return job.cancel();
                    for (const json& c : tool_call_chunks(r, job.id(), job.created(), d.index, d.tool_calls))
                        if (!ex.write(sse(c))) return job.cancel();
                    if (!d.finish_reason.empty() &&
                        !ex.write(sse(chunk_json(r, job.id(), job.created(), d.index, "", d.finish_reason, false))))
                        return job.cancel();
                    continue;
                }
                if (!ex.write(sse(chunk_json(r, job.id(), job.created(), d.index, d.text, d.finish_reason, false, lp))))
                    return job.cancel();  // the client went away
            }
            last_write = std::chrono::steady_clock::now();
        }
    }

    // The tokenizer routes' logic is in api/tokenizer_endpoints.
    void tokenize(http::Exchange& ex) {
        try {
            send_json(ex, 200, tokenize_json(parse_body(ex.request()), ctx));
        } catch (const ApiError& e) {
            send_error(ex, e);
        }
    }

    void detokenize(http::Exchange& ex) {
        try {
            send_json(ex, 200, detokenize_json(parse_body(ex.request()), ctx));
        } catch (const ApiError& e) {
            send_error(ex, e);
        }
    }
};

bool valid_cors_origin(const std::string& origin) {
    if (origin == "*") return true;
    const size_t sep = origin.find("://");
    if (sep == std::string::npos || sep == 0) return false;
    const std::string scheme = origin.substr(0, sep), rest = origin.substr(sep + 3);
    if (scheme != "http" && scheme != "https") return false;
    if (rest.empty() || rest.find_first_of("/?#@ ") != std::string::npos) return false;
    const size_t colon = rest.rfind(':');
    if (colon == std::string::npos || rest.back() == ']') return true;  // no port (an IPv6 literal ends with ])
    const std::string port = rest.substr(colon + 1);
    return colon > 0 && !port.empty() && port.size() <= 5 &&
           port.find_first_not_of("0123456789") == std::string::npos && std::stoi(port) <= 65535;
}

Server::Server(Engine& engine, const tok::Tokenizer& tokenizer, const ChatTemplate* chat_template,
               ServerOptions options)
    : impl_(std::make_unique<Impl>(engine, tokenizer, chat_template, std::move(options))) {}

Server::~Server() {
    stop();
    if (impl_->engine_thread.joinable()) impl_->engine_thread.join();
}

void Server::bind() {
    impl_->http->bind();
    port_ = impl_->http->port();
}

void Server::serve() {
    impl_->engine_thread = std::thread([this] { impl_->engine.run(impl_->stop_engine); });
    impl_->http->run();  // returns once stopped and every request in progress has ended
    impl_->stop_engine = true;
    if (impl_->engine_thread.joinable()) impl_->engine_thread.join();
}

void Server::stop() {
    impl_->http->stop(std::chrono::milliseconds(int64_t(impl_->opt.drain_timeout_s * 1000)));
}

}  // namespace sluice::api
