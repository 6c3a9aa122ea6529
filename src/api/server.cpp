#include "api/server.h"

#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <ctime>
#include <map>
#include <mutex>
#include <utility>

#include "api/completion_job.h"
#include "api/tokenizer_endpoints.h"
#include "core/error.h"
#include "core/log.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace sluice::api {

using nlohmann::json;

namespace {

void send_json(httplib::Response& res, int status, const json& body) {
    res.status = status;
    res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) { send_json(res, e.status, error_json(e)); }

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
nlohmann::ordered_json parse_body(const httplib::Request& req) {
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
    httplib::Server http;
    std::atomic<bool> stop_engine{false};
    std::thread engine_thread;
    int64_t started_unix_s = int64_t(std::time(nullptr));

    Impl(Engine& e, const tok::Tokenizer& t, const ChatTemplate* ct, ServerOptions o)
        : engine(e), tok(t), chat_template(ct), opt(std::move(o)) {
        ctx = make_model_context(engine, tok, chat_template, opt.model_id, opt.default_max_tokens);
        ctx.speculative_tokens = opt.speculative_tokens;
        routes();
    }

    // CORS: an allowed Origin gets Access-Control-Allow-Origin on whatever answers the request (set here, before
    // routing, it stays on the response). True when the request was a preflight, answered here: browsers send
    // those without credentials, so they come before the API key check.
    bool cors(const httplib::Request& req, httplib::Response& res) const {
        const std::string origin = req.get_header_value("Origin");
        const bool any = std::find(opt.cors_origins.begin(), opt.cors_origins.end(), "*") != opt.cors_origins.end();
        const bool allowed = !origin.empty() && (any || std::find(opt.cors_origins.begin(), opt.cors_origins.end(),
                                                                  origin) != opt.cors_origins.end());
        if (allowed) {
            res.set_header("Access-Control-Allow-Origin", any ? "*" : origin);
            if (!any) res.set_header("Vary", "Origin");
        }
        if (req.method != "OPTIONS") return false;
        if (!allowed) {
            send_error(res,
                       ApiError(403, "permission_error",
                                origin.empty() ? "OPTIONS is answered only as a CORS preflight (with Origin)"
                                               : "origin " + origin + " may not call this server (--cors-origin)"));
            return true;
        }
        res.status = 204;
        res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        const std::string asked = req.get_header_value("Access-Control-Request-Headers");
        res.set_header("Access-Control-Allow-Headers",
                       asked.empty() ? "Authorization, Content-Type, X-Api-Key" : asked);
        res.set_header("Access-Control-Max-Age", "600");
        return true;
    }

    void routes() {
        const int threads = std::max(2, opt.http_threads);
        http.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
        http.set_payload_max_length(opt.max_body_bytes);
        http.set_read_timeout(std::chrono::seconds(60));
        http.set_write_timeout(std::chrono::seconds(60));
        http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
            // DNS rebinding: a page on evil.example that resolves to 127.0.0.1 reaches a loopback server with
            // Host: evil.example. A loopback server answers only to loopback names.
            if (is_loopback(opt.host) && req.has_header("Host") &&
                !is_loopback(host_name(req.get_header_value("Host")))) {
                send_error(res, ApiError(403, "permission_error",
                                         "the Host header names another host; this server answers to localhost only"));
                return httplib::Server::HandlerResponse::Handled;
            }
            if (cors(req, res)) return httplib::Server::HandlerResponse::Handled;
            if (opt.api_keys.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
            std::string key = req.get_header_value("X-Api-Key");
            const std::string auth = req.get_header_value("Authorization");
            if (auth.rfind("Bearer ", 0) == 0) key = auth.substr(7);
            bool ok = false;
            for (const auto& k : opt.api_keys) ok = same_key(key, k) || ok;
            if (ok) return httplib::Server::HandlerResponse::Unhandled;
            send_error(res, ApiError(401, "authentication_error",
                                     key.empty() ? "missing API key: send Authorization: Bearer KEY"
                                                 : "incorrect API key provided",
                                     "", "invalid_api_key"));
            return httplib::Server::HandlerResponse::Handled;
        });
        // Statuses httplib sets itself (404 no route, 413 body too large, 400 bad request line) get our envelope.
        http.set_error_handler(
            httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
                if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
                const int s = res.status;
                const char* type = s == 404 ? "not_found_error" : s >= 500 ? "server_error" : "invalid_request_error";
                std::string msg = s == 404   ? "no such route: " + req.method + " " + req.path
                                  : s == 413 ? "the request body is too large"
                                  : s == 405 ? "method not allowed"
                                             : "bad request";
                send_json(res, s, error_json(ApiError(s, type, msg)));
                return httplib::Server::HandlerResponse::Handled;
            }));
        http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
            std::string msg = "internal error";
            try {
                std::rethrow_exception(ep);
            } catch (const std::exception& e) {
                msg = e.what();
            } catch (...) {
            }
            send_error(res, ApiError(500, "server_error", msg));
        });

        http.set_logger([this](const httplib::Request& req, const httplib::Response& res) { count(req, res); });
        http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
            res.set_content(metrics_text(), "text/plain; version=0.0.4");
        });
        http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
            send_json(res, 200, {{"status", "ok"}});
        });
        http.Get("/v1/models",
                 [this](const httplib::Request&, httplib::Response& res) { send_json(res, 200, models_json()); });
        http.Get("/v1/models/(.+)", [this](const httplib::Request& req, httplib::Response& res) {
            if (req.matches[1] != opt.model_id)
                return send_error(res, ApiError(404, "not_found_error",
                                                "the model '" + std::string(req.matches[1]) + "' does not exist",
                                                "model", "model_not_found"));
            send_json(res, 200, models_json()["data"][0]);
        });
        http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
            completion(Endpoint::chat_completions, req, res);
        });
        http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
            completion(Endpoint::completions, req, res);
        });
        http.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) { tokenize(req, res); });
        http.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) { detokenize(req, res); });
        http.Get("/tokenizer_info", [this](const httplib::Request&, httplib::Response& res) {
            send_json(res, 200, tokenizer_info_json(ctx));
        });
    }

    // HTTP responses by route and status, for /metrics (routes outside ours count as "other": no unbounded labels).
    std::mutex counts_mu;
    std::map<std::pair<std::string, int>, uint64_t> http_counts;
    void count(const httplib::Request& req, const httplib::Response& res) {
        static const char* known[] = {
            "/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics", "/tokenize", "/detokenize",
            "/tokenizer_info"};
        std::string route = "other";
        for (const char* k : known)
            if (req.path == k) route = k;
        if (req.path.rfind("/v1/models/", 0) == 0) route = "/v1/models/{id}";
        std::lock_guard lk(counts_mu);
        ++http_counts[{route, res.status}];
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
        metric("sluice_draft_tokens_total", "counter", "Speculative draft tokens verified.", double(st.drafted));
        metric("sluice_draft_tokens_accepted_total", "counter", "Speculative draft tokens kept.", double(st.accepted));
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

    void completion(Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
        std::shared_ptr<CompletionJob> job;
        try {
            ParsedRequest parsed = parse_request(endpoint, parse_body(req), ctx);
            if (!parsed.ignored_fields.empty()) {
                std::string names;
                for (const auto& f : parsed.ignored_fields) names += (names.empty() ? "" : ", ") + f;
                log_info("ignored request fields: ", names);
            }
            if (engine.stats().waiting >= opt.max_waiting)
                throw ApiError(503, "server_error", "the server is busy: too many requests are waiting; retry later");
            try {
                job = std::make_shared<CompletionJob>(engine, tok, std::move(parsed));
            } catch (const Error& e) {
                throw ApiError(400, "invalid_request_error", e.what());
            }
            if (!job->request().stream) {
                const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(opt.request_timeout_s);
                send_json(res, 200, job->wait_result(deadline));
                return;
            }
        } catch (const ApiError& e) {
            return send_error(res, e);
        }
        stream(job, res);
    }

    // Server-sent events: the first chunk goes out at once (headers committed, role announced), then deltas as they
    // come, `: ping` comments while nothing does, the usage chunk if asked, and [DONE]. An error after the headers
    // is sent in-band as data: {"error": ...}, which the openai client raises as APIError.
    void stream(std::shared_ptr<CompletionJob> job, httplib::Response& res) {
        res.set_header("Cache-Control", "no-cache");
        res.set_header("X-Accel-Buffering", "no");
        auto started = std::make_shared<bool>(false);
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(opt.request_timeout_s);
        const auto ping = std::chrono::milliseconds(std::max<int64_t>(1, opt.ping_interval_s) * 1000);
        res.set_chunked_content_provider(
            "text/event-stream",
            [job, started, deadline, ping](size_t, httplib::DataSink& sink) {
                const ParsedRequest& r = job->request();
                auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
                if (!*started) {
                    *started = true;
                    if (r.endpoint == Endpoint::chat_completions)
                        for (int i = 0; i < r.n; ++i)
                            if (!write(sse(chunk_json(r, job->id(), job->created(), i, "", "", true)))) return false;
                    return true;
                }
                if (job->done()) {
                    if (r.include_usage) write(sse(usage_chunk_json(r, job->id(), job->created(), job->usage())));
                    write("data: [DONE]\n\n");
                    sink.done();
                    return true;
                }
                if (std::chrono::steady_clock::now() > deadline) {
                    job->cancel();
                    write(sse(error_json(ApiError(504, "timeout_error", "the request did not finish in time"))));
                    write("data: [DONE]\n\n");
                    sink.done();
                    return true;
                }
                std::vector<ChoiceDelta> ds;
                if (!job->wait(ds, ping)) return write(": ping\n\n");
                for (auto& d : ds) {
                    if (!d.error.empty()) {
                        job->cancel();
                        write(sse(error_json(ApiError(500, "server_error", "generation failed: " + d.error))));
                        write("data: [DONE]\n\n");
                        sink.done();
                        return true;
                    }
                    json lp = nullptr;
                    if (r.logprobs) lp = logprobs_object(r, d.logprobs, d.text_offset);
                    if (!write(
                            sse(chunk_json(r, job->id(), job->created(), d.index, d.text, d.finish_reason, false, lp))))
                        return false;  // the client went away: the releaser cancels the job
                }
                return true;
            },
            [job](bool) { job->cancel(); });
    }

    // The tokenizer routes' logic is in api/tokenizer_endpoints.
    void tokenize(const httplib::Request& req, httplib::Response& res) {
        try {
            send_json(res, 200, tokenize_json(parse_body(req), ctx));
        } catch (const ApiError& e) {
            send_error(res, e);
        }
    }

    void detokenize(const httplib::Request& req, httplib::Response& res) {
        try {
            send_json(res, 200, detokenize_json(parse_body(req), ctx));
        } catch (const ApiError& e) {
            send_error(res, e);
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
    const auto& o = impl_->opt;
    if (o.port == 0) {
        port_ = impl_->http.bind_to_any_port(o.host);
        SLUICE_CHECK(port_ > 0, "cannot listen on ", o.host, " (any port)");
    } else {
        SLUICE_CHECK(impl_->http.bind_to_port(o.host, o.port), "cannot listen on ", o.host, ":", o.port,
                     " (address in use, or not an address of this machine)");
        port_ = o.port;
    }
}

void Server::serve() {
    impl_->engine_thread = std::thread([this] { impl_->engine.run(impl_->stop_engine); });
    impl_->http.listen_after_bind();
    impl_->stop_engine = true;
    if (impl_->engine_thread.joinable()) impl_->engine_thread.join();
}

void Server::stop() {
    impl_->http.stop();
    impl_->stop_engine = true;
}

}  // namespace sluice::api
