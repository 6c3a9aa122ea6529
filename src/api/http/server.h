// A small HTTP/1.1 server built for a long-running inference server (why not a library: docs/ARCHITECTURE.md).
//
// One I/O thread owns every connection: it accepts, reads and parses requests (api/http/request_parser) under
// deadlines, and answers protocol errors itself, so a slow or idle client holds only a connection, never a thread.
// A complete request goes to a handler thread; while the handler runs, the I/O thread keeps watching the socket and
// marks the exchange `client_gone()` the moment the peer closes or resets it, so a handler can cancel work nobody
// will read. A client that shuts down its sending side counts as gone too (as nginx treats it): a half-close and a
// close look the same until a write, and an abandoned request on a big model costs hours. Quick requests (the caller says which: /health, /metrics) run on a pool of their own and never wait
// behind long ones.
//
// Bounds: at most max_connections open (one more is answered 503 and closed); request line + headers within
// header_timeout_ms of their first byte, the body within body_timeout_ms of the headers (408, then close); an idle
// kept-alive connection closes after idle_timeout_ms; a response write that makes no progress for write_timeout_ms
// ends its connection. Every body limit holds for every framing (see request_parser.h).
//
// stop(drain): no new connections; connections with no request in progress close at once; handlers see draining()
// and should finish by the drain deadline; when it passes, the sockets still open are shut down. run() returns when
// every handler has returned.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/http/request_parser.h"

namespace sluice::api::http {

using Clock = std::chrono::steady_clock;

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8080;  // 0: any free port
    Limits limits;
    int max_connections = 512;
    int max_handlers = 64;       // long requests handled at once; more wait for a handler in arrival order
    int quick_handlers = 2;      // threads for quick requests
    int64_t header_timeout_ms = 10'000;
    int64_t body_timeout_ms = 60'000;
    int64_t idle_timeout_ms = 60'000;
    int64_t write_timeout_ms = 30'000;
    // The body of an error the server answers itself (400, 408, 413, 431, 503, ...): (content type, body).
    std::function<std::pair<std::string, std::string>(int status, const std::string& message)> error_body;
    // Called once per response sent (handler or protocol error; path empty when no request was parsed).
    std::function<void(const std::string& path, int status)> on_response;
};

struct Connection;
class Server;

// One request and its answer: either one respond(), or start_stream(), write()s and end_stream().
class Exchange {
public:
    Exchange(Server& server, std::shared_ptr<Connection> conn, Request request);
    ~Exchange();
    Exchange(const Exchange&) = delete;
    Exchange& operator=(const Exchange&) = delete;

    const Request& request() const { return req_; }
    void add_header(std::string name, std::string value);  // sent with the answer, whatever it is
    void respond(int status, std::string_view content_type, std::string_view body);
    // Sends the status and headers (Transfer-Encoding: chunked on HTTP/1.1); false when the client is gone.
    bool start_stream(int status, std::string_view content_type);
    bool write(std::string_view data);  // one chunk; false when the client is gone or the write timed out
    void end_stream();

    bool responded() const { return status_ != 0; }
    int status() const { return status_; }
    bool failed() const { return failed_; }  // a write failed: the connection will be closed
    bool client_gone() const;                // the peer closed or reset the connection
    bool draining() const;                   // the server is stopping: finish by drain_deadline()
    Clock::time_point drain_deadline() const;

private:
    bool send(std::string_view data);
    std::string head(int status, std::string_view content_type, const std::string& framing) const;

    Server& server_;
    std::shared_ptr<Connection> conn_;
    Request req_;
    std::vector<std::pair<std::string, std::string>> headers_;
    int status_ = 0;
    bool streaming_ = false, ended_ = false, failed_ = false;
};

using Handler = std::function<void(Exchange&)>;

class Server {
public:
    // is_quick(request): run it on the quick pool (must not block for long).
    Server(ServerOptions options, Handler handler, std::function<bool(const Request&)> is_quick);
    ~Server();
    Server(const Server&) = delete;
    Server& operator=(const Server&) = delete;

    void bind();  // throws Error naming the address when it cannot listen
    int port() const { return port_; }
    void run();   // serves until stop() and the drain are done
    // Thread-safe; the first call sets the drain deadline, later ones change nothing.
    void stop(std::chrono::milliseconds drain);

    struct Impl;

private:
    friend class Exchange;
    std::unique_ptr<Impl> impl_;
    int port_ = 0;
};

// "HTTP/1.1 413 Payload Too Large" reason phrases.
std::string_view reason_phrase(int status);

}  // namespace sluice::api::http
