// sluice serve -m DIR [--host 127.0.0.1] [--port 8080] [--api-key KEY] [--parallel N] [--ctx TOKENS]
// The OpenAI-compatible HTTP server (api/server). Prints "sluice: listening on http://HOST:PORT" on stderr once the
// port is bound (with --port 0 that line names the port chosen), and stops cleanly on SIGINT/SIGTERM.
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <thread>

#include "api/server.h"
#include "commands.h"
#include "common.h"
#include "core/error.h"
#include "models/model.h"
#include "runtime/engine.h"

namespace sluice::cli {

namespace {

std::vector<std::string> read_keys(const std::string& path) {
    std::ifstream f(path);
    SLUICE_CHECK(f, path, ": cannot read the API key file");
    std::vector<std::string> keys;
    for (std::string line; std::getline(f, line);) {
        while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
        if (!line.empty() && line[0] != '#') keys.push_back(line);
    }
    SLUICE_CHECK(!keys.empty(), path, ": no API key in the file");
    return keys;
}

}  // namespace

void register_serve(CLI::App& app) {
    struct Args {
        ModelArgs m;
        EngineArgs e;
        std::string host = "127.0.0.1", alias, api_key_file, max_body = "16M";
        std::vector<std::string> api_keys, cors_origins;
        int port = 8080;
        int64_t batch_rows = 512, max_tokens = 2048, timeout_s = 3600, ping_s = 15, max_waiting = 256;
        double drain_s = 20;
        int64_t header_timeout_s = 10, body_timeout_s = 60;
        int http_threads = 64, max_connections = 512;
    };
    auto a = std::make_shared<Args>();
    auto* sub = app.add_subcommand("serve", "OpenAI-compatible HTTP server (/v1/chat/completions, /v1/completions)");
    add_model_args(sub, a->m);
    add_engine_args(sub, a->e);
    sub->add_option("--host", a->host, "address to listen on (0.0.0.0 exposes the server to the network)")
        ->capture_default_str();
    sub->add_option("--port", a->port, "port (0: any free one, printed at start)")
        ->check(CLI::Range(0, 65535))
        ->capture_default_str();
    sub->add_option("--api-key", a->api_keys,
                    "require this key (Authorization: Bearer KEY) on every route but "
                    "/health; repeat for several; also $SLUICE_API_KEY");
    sub->add_option("--api-key-file", a->api_key_file, "file with one API key per line");
    sub->add_option("--cors-origin", a->cors_origins,
                    "let pages from this origin (http://host:port, or * for any) call the API from a browser; repeat "
                    "for several")
        ->check(CLI::Validator(
            [](std::string& o) {
                return api::valid_cors_origin(o) ? std::string()
                                                 : "must be * or scheme://host[:port] with no path, got '" + o + "'";
            },
            "ORIGIN"));
    sub->add_option("--alias", a->alias, "model id reported by /v1/models (default: the folder's name)");
    sub->add_option("--batch-rows", a->batch_rows, "token rows per forward pass (prefill chunks + decode rows)")
        ->check(positive())
        ->capture_default_str();
    sub->add_option("--max-tokens", a->max_tokens, "completion tokens when a request sets no max_tokens")
        ->check(positive())
        ->capture_default_str();
    sub->add_option("--timeout", a->timeout_s, "seconds a request may run before it is cancelled")
        ->check(positive())
        ->capture_default_str();
    sub->add_option("--ping-interval", a->ping_s, "seconds between SSE keep-alive comments while a stream waits")
        ->check(positive())
        ->capture_default_str();
    sub->add_option("--max-waiting", a->max_waiting, "requests queued beyond the running ones before 503")
        ->check(positive())
        ->capture_default_str();
    sub->add_option("--http-threads", a->http_threads,
                    "POST requests handled at once, each on a thread of its own (at least --parallel + 4; more wait "
                    "in order; GETs and slow clients hold no thread)")
        ->check(CLI::Range(2, 4096))
        ->capture_default_str();
    sub->add_option("--max-connections", a->max_connections,
                    "open connections (idle and slow ones included); one more is answered 503")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
    sub->add_option("--max-body", a->max_body,
                    "largest request body (e.g. 16M), for every transfer encoding; larger ones get 413")
        ->capture_default_str();
    sub->add_option("--header-timeout", a->header_timeout_s,
                    "seconds a client may take to send a request's line and headers (then 408)")
        ->check(positive())
        ->capture_default_str();
    sub->add_option("--body-timeout", a->body_timeout_s, "seconds a client may take to send a request's body")
        ->check(positive())
        ->capture_default_str();
    sub->add_option("--drain-timeout", a->drain_s,
                    "on SIGTERM/SIGINT: seconds requests in progress may finish before they are cut (streams get an "
                    "error event and [DONE])")
        ->check(CLI::Range(0.0, 86400.0))
        ->capture_default_str();
    sub->callback([a] {
        // SIGINT/SIGTERM go to one watcher thread: blocked here, before any other thread exists (the worker pool,
        // the engine, HTTP), so every thread inherits the block. Before the server exists a signal just exits 0 (a
        // long model load stays interruptible); after, it stops the server (a drain), which returns from serve().
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &set, nullptr);
        std::signal(SIGPIPE, SIG_IGN);
        std::atomic<api::Server*> running{nullptr};
        std::atomic<bool> finished{false};
        std::thread watcher([&running, &finished, set] {
            int sig = 0;
            sigwait(&set, &sig);
            if (finished) return;
            api::Server* s = running.load();
            if (!s) {
                std::fprintf(stderr, "sluice: stopped by signal %d before serving\n", sig);
                std::_Exit(0);
            }
            s->stop();  // kept even before serve() starts: serve() then drains at once
        });
        struct JoinWatcher {
            std::thread& t;
            std::atomic<bool>& finished;
            void join() {
                if (!t.joinable()) return;
                finished = true;
                pthread_kill(t.native_handle(), SIGTERM);  // wakes sigwait if no signal came
                t.join();
            }
            ~JoinWatcher() { join(); }
        } join_watcher{watcher, finished};
        check_model_folder(a->m.model);
        std::vector<std::string> keys = a->api_keys;
        if (!a->api_key_file.empty())
            for (auto& k : read_keys(a->api_key_file)) keys.push_back(k);
        if (const char* env = std::getenv("SLUICE_API_KEY"); env && *env && keys.empty()) keys.emplace_back(env);
        TextSide text = load_text_side(a->m.model, "serve");
        if (!text.chat_template)
            std::fprintf(stderr, "sluice: warning: no chat template (%s); /v1/chat/completions will answer 400\n",
                         text.template_error.c_str());
        const auto [model, draft, dspark, eagle3, eo] = load_serving_model(a->m, a->e, a->batch_rows);
        Engine engine(*model, eo);
        api::ServerOptions so;
        so.host = a->host;
        so.port = a->port;
        so.api_keys = keys;
        so.cors_origins = a->cors_origins;
        so.model_id = !a->alias.empty() ? a->alias : model_id_from_folder(a->m.model);
        so.default_max_tokens = a->max_tokens;
        so.speculative_tokens = a->e.speculative;
        if (draft) so.make_drafter = [d = draft.get()] { return d->drafter(); };
        so.draft_gate = a->e.draft_gate == "on";
        if (draft) so.draft_bytes_per_token = pass_bytes_per_token(draft->model(), *model);
        if (dspark) so.make_drafter = [d = dspark.get()] { return d->drafter(); };
        if (eagle3) so.make_drafter = [d = eagle3.get()] { return d->drafter(); };
        so.request_timeout_s = a->timeout_s;
        so.ping_interval_s = a->ping_s;
        so.max_waiting = a->max_waiting;
        // a waiting non-streamed request or an open stream holds an HTTP thread: never fewer than --parallel + 4
        so.http_threads = std::max<int>(a->http_threads, int(std::min<int64_t>(a->m.parallel, 4096)) + 4);

        so.max_connections = a->max_connections;
        so.max_body_bytes = parse_size(a->max_body);
        SLUICE_CHECK(so.max_body_bytes > 0, "--max-body: must be more than 0 bytes, got ", a->max_body);
        so.header_timeout_s = a->header_timeout_s;
        so.body_timeout_s = a->body_timeout_s;
        so.drain_timeout_s = a->drain_s;

        api::Server server(engine, *text.tokenizer, text.chat_template.get(), so);
        running = &server;  // from here a signal drains the server (stop() before serve() is kept)
        try {
            server.bind();
        } catch (...) {
            running = nullptr;
            throw;
        }
        std::fprintf(stderr, "sluice: serving %s (%lld sequences at once, %lld context tokens) on http://%s:%d%s\n",
                     so.model_id.c_str(), (long long)eo.max_sequences, (long long)eo.max_context_tokens,
                     so.host.c_str(), server.port(), keys.empty() ? "" : " (API key required)");
        std::fprintf(stderr, "sluice: listening on http://%s:%d\n", so.host.c_str(), server.port());
        std::fflush(stderr);
        server.serve();
        join_watcher.join();  // before the server is destroyed: the watcher may be calling stop() on it
        std::fprintf(stderr, "sluice: server stopped\n");
    });
}

}  // namespace sluice::cli
