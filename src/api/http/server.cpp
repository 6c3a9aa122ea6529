#include "api/http/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "core/error.h"

namespace sluice::api::http {

namespace {

constexpr int64_t kLingerMs = 2000;        // after an error answer: read and drop what the client still sends
constexpr int64_t kAcceptPauseMs = 100;    // out of file descriptors: stop accepting for this long
constexpr size_t kReadBytesPerEvent = 256 << 10;
constexpr int64_t kForceAfterDrainMs = 1000;  // handlers get this long past the drain deadline to send their last
                                              // words (an error event and [DONE]) before their sockets are shut

int64_t ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(b - a).count();
}

}  // namespace

std::string_view reason_phrase(int status) {
    switch (status) {
        case 100: return "Continue";
        case 200: return "OK";
        case 204: return "No Content";
        case 400: return "Bad Request";
        case 401: return "Unauthorized";
        case 403: return "Forbidden";
        case 404: return "Not Found";
        case 405: return "Method Not Allowed";
        case 408: return "Request Timeout";
        case 413: return "Payload Too Large";
        case 417: return "Expectation Failed";
        case 429: return "Too Many Requests";
        case 431: return "Request Header Fields Too Large";
        case 500: return "Internal Server Error";
        case 501: return "Not Implemented";
        case 503: return "Service Unavailable";
        case 504: return "Gateway Timeout";
        case 505: return "HTTP Version Not Supported";
        default: return "Status";
    }
}

struct Connection {
    explicit Connection(int f, Limits limits) : fd(f), parser(limits) {}
    enum class Phase { reading, busy, lingering };
    const int fd;
    RequestParser parser;  // the I/O thread's alone
    std::string in;        // bytes read and not parsed yet (a pipelined request)
    Phase phase = Phase::reading;
    Clock::time_point deadline;
    bool in_body = false;  // the current request's headers are done (its body deadline runs)
    std::atomic<bool> gone{false};
};

struct Server::Impl {
    struct Job {
        std::shared_ptr<Connection> conn;
        Request req;
    };

    ServerOptions opt;
    Handler handler;
    std::function<bool(const Request&)> is_quick;
    Server* owner = nullptr;
    int listen_fd = -1, epoll_fd = -1, wake_fd = -1;
    std::unordered_map<int, std::shared_ptr<Connection>> conns;  // the I/O thread's alone
    int busy = 0;                                                // connections with a handler running
    Clock::time_point accept_paused_until{};

    std::mutex mu;  // guards everything below
    std::condition_variable cv;
    std::deque<Job> long_jobs, quick_jobs;
    std::vector<std::thread> long_threads, quick_threads;
    int long_idle = 0;
    bool workers_exit = false;
    std::vector<std::pair<std::shared_ptr<Connection>, bool>> returned;  // (connection, keep it open)

    std::atomic<bool> stopping{false};
    std::atomic<int64_t> drain_deadline_ns{0};

    ~Impl() {
        for (int fd : {listen_fd, epoll_fd, wake_fd})
            if (fd >= 0) ::close(fd);
        for (auto& [fd, c] : conns) ::close(fd);
    }

    Clock::time_point drain_deadline() const { return Clock::time_point(Clock::duration(drain_deadline_ns.load())); }

    void wake() {
        const uint64_t one = 1;
        [[maybe_unused]] ssize_t n = ::write(wake_fd, &one, sizeof one);
    }

    void watch(const Connection& c, uint32_t events, int op = EPOLL_CTL_MOD) {
        epoll_event ev{};
        ev.events = events;
        ev.data.fd = c.fd;
        if (::epoll_ctl(epoll_fd, op, c.fd, &ev) != 0 && op == EPOLL_CTL_MOD && errno == ENOENT)
            ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, c.fd, &ev);
    }

    void close_conn(const std::shared_ptr<Connection>& c) {
        ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c->fd, nullptr);
        ::close(c->fd);
        conns.erase(c->fd);
    }

    // Best effort, never blocking the I/O thread: these answers are small, and a client that does not read them
    // loses them.
    void send_now(int fd, const std::string& bytes) {
        size_t off = 0;
        while (off < bytes.size()) {
            const ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
            if (n > 0) off += size_t(n);
            else if (n < 0 && errno == EINTR) continue;
            else break;
        }
    }

    std::string error_response(int status, const std::string& message) const {
        auto [type, body] = opt.error_body ? opt.error_body(status, message)
                                           : std::pair<std::string, std::string>{"text/plain", message + "\n"};
        return "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason_phrase(status)) +
               "\r\nContent-Type: " + type + "\r\nContent-Length: " + std::to_string(body.size()) +
               "\r\nConnection: close\r\n\r\n" + body;
    }

    // Answers a protocol error, then reads and drops what the client still sends for a while before closing, so
    // the answer is not lost to a reset (closing with unread bytes would send RST).
    void answer_and_linger(const std::shared_ptr<Connection>& c, int status, const std::string& message) {
        send_now(c->fd, error_response(status, message));
        if (opt.on_response) opt.on_response(c->parser.headers_done() ? c->parser.request().path : "", status);
        ::shutdown(c->fd, SHUT_WR);
        c->phase = Connection::Phase::lingering;
        c->in.clear();
        c->deadline = Clock::now() + std::chrono::milliseconds(kLingerMs);
        watch(*c, EPOLLIN | EPOLLRDHUP);
    }

    void accept_all() {
        while (true) {
            const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0) {
                if (errno == EINTR || errno == ECONNABORTED) continue;
                if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                    accept_paused_until = Clock::now() + std::chrono::milliseconds(kAcceptPauseMs);
                    ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, listen_fd, nullptr);
                }
                return;
            }
            if (int64_t(conns.size()) >= opt.max_connections) {
                send_now(fd, error_response(503, "the server has too many open connections; retry later"));
                if (opt.on_response) opt.on_response("", 503);
                ::close(fd);
                continue;
            }
            const int one = 1;
            ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            auto c = std::make_shared<Connection>(fd, opt.limits);
            c->deadline = Clock::now() + std::chrono::milliseconds(opt.header_timeout_ms);
            conns.emplace(fd, c);
            watch(*c, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_ADD);
        }
    }

    void on_event(const std::shared_ptr<Connection>& c, uint32_t events) {
        if (c->phase == Connection::Phase::busy) {
            // only hang-ups are watched while a handler runs: the client went away
            if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
                c->gone = true;
                ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c->fd, nullptr);
            }
            return;
        }
        char buf[16 << 10];
        size_t got = 0;
        while (got < kReadBytesPerEvent) {
            const ssize_t n = ::recv(c->fd, buf, sizeof buf, 0);
            if (n > 0) {
                got += size_t(n);
                if (c->phase == Connection::Phase::reading) c->in.append(buf, size_t(n));
                continue;
            }
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
            close_conn(c);  // EOF or error: nothing to answer (a half-sent request is dropped)
            return;
        }
        if (c->phase == Connection::Phase::reading) process_input(c);
    }

    void process_input(const std::shared_ptr<Connection>& c) {
        while (c->phase == Connection::Phase::reading && !c->in.empty()) {
            const bool fresh = c->parser.bytes_seen() == 0;
            const size_t used = c->parser.feed(c->in.data(), c->in.size());
            c->in.erase(0, used);
            const auto now = Clock::now();
            if (fresh && c->parser.bytes_seen() > 0)
                c->deadline = now + std::chrono::milliseconds(opt.header_timeout_ms);
            const auto st = c->parser.state();
            if (st == RequestParser::State::error)
                return answer_and_linger(c, c->parser.error_status(), c->parser.error_message());
            if (c->parser.headers_done() && !c->in_body) {
                c->in_body = true;
                c->deadline = now + std::chrono::milliseconds(opt.body_timeout_ms);
                if (c->parser.request().expect_continue && st == RequestParser::State::body)
                    send_now(c->fd, "HTTP/1.1 100 Continue\r\n\r\n");
            }
            if (st == RequestParser::State::complete) return dispatch(c, c->parser.take());
            if (used == 0) break;
        }
    }

    void dispatch(const std::shared_ptr<Connection>& c, Request req) {
        c->phase = Connection::Phase::busy;
        c->in_body = false;
        watch(*c, EPOLLRDHUP);
        ++busy;
        const bool quick = is_quick && is_quick(req);
        std::lock_guard lk(mu);
        (quick ? quick_jobs : long_jobs).push_back(Job{c, std::move(req)});
        if (quick) {
            if (quick_threads.empty())
                for (int i = 0; i < std::max(1, opt.quick_handlers); ++i)
                    quick_threads.emplace_back([this] { work(true); });
        } else if (long_idle < int64_t(long_jobs.size()) && int64_t(long_threads.size()) < opt.max_handlers) {
            long_threads.emplace_back([this] { work(false); });
            ++long_idle;  // counted idle until it takes a job
        }
        cv.notify_all();
    }

    void work(bool quick) {
        std::unique_lock lk(mu);
        while (true) {
            auto& q = quick ? quick_jobs : long_jobs;
            cv.wait(lk, [&] { return workers_exit || !q.empty(); });
            if (q.empty()) return;
            Job job = std::move(q.front());
            q.pop_front();
            if (!quick) --long_idle;
            lk.unlock();
            run_job(std::move(job.conn), std::move(job.req));
            lk.lock();
            if (!quick) ++long_idle;
        }
    }

    // Runs the handler, then hands the connection back to the I/O thread (kept open or not).
    void run_job(std::shared_ptr<Connection> conn, Request req) {
        bool keep = false;
        {
            Exchange ex(*owner, conn, std::move(req));
            if (!conn->gone) {
                try {
                    handler(ex);
                } catch (const std::exception& e) {
                    if (!ex.responded()) ex.respond(500, "text/plain", std::string("internal error: ") + e.what());
                } catch (...) {
                    if (!ex.responded()) ex.respond(500, "text/plain", "internal error");
                }
                if (!ex.responded()) ex.respond(500, "text/plain", "internal error: the handler sent no answer");
                ex.end_stream();
            }
            keep = ex.request().keep_alive && ex.responded() && !ex.failed() && !conn->gone && !stopping &&
                   ex.request().minor_version == 1;
            if (opt.on_response && ex.responded()) opt.on_response(ex.request().path, ex.status());
        }
        {
            std::lock_guard lk(mu);
            returned.emplace_back(conn, keep);
        }
        wake();
    }

    void take_returned() {
        std::vector<std::pair<std::shared_ptr<Connection>, bool>> back;
        {
            std::lock_guard lk(mu);
            back.swap(returned);
        }
        for (auto& [c, keep] : back) {
            --busy;
            // gone is the I/O thread's own verdict (a hang-up seen while the handler ran, maybe after it decided to
            // keep the connection): such a socket is out of epoll already and must close now
            if (!keep || stopping || c->gone) {
                close_conn(c);
                continue;
            }
            c->phase = Connection::Phase::reading;
            c->deadline = Clock::now() + std::chrono::milliseconds(opt.idle_timeout_ms);
            watch(*c, EPOLLIN | EPOLLRDHUP);
            process_input(c);  // a pipelined request may be waiting
        }
    }

    void check_deadlines(Clock::time_point now) {
        std::vector<std::shared_ptr<Connection>> expired;
        for (auto& [fd, c] : conns)
            if (c->phase != Connection::Phase::busy && now >= c->deadline) expired.push_back(c);
        for (auto& c : expired) {
            if (c->phase == Connection::Phase::reading && c->parser.bytes_seen() > 0)
                answer_and_linger(c, 408,
                                  c->parser.headers_done() ? "the request body did not arrive in time"
                                                           : "the request headers did not arrive in time");
            else
                close_conn(c);  // idle, or done lingering
        }
    }

    void loop() {
        bool forced = false, closed_listener = false;
        epoll_event events[64];
        while (true) {
            const int n = ::epoll_wait(epoll_fd, events, 64, 50);
            for (int i = 0; i < n; ++i) {
                const int fd = events[i].data.fd;
                if (fd == listen_fd) {
                    if (!stopping) accept_all();
                } else if (fd == wake_fd) {
                    uint64_t v = 0;
                    [[maybe_unused]] ssize_t r = ::read(wake_fd, &v, sizeof v);
                } else if (auto it = conns.find(fd); it != conns.end()) {
                    on_event(std::shared_ptr<Connection>(it->second), events[i].events);
                }
            }
            take_returned();
            const auto now = Clock::now();
            if (!stopping && accept_paused_until != Clock::time_point{} && now >= accept_paused_until) {
                accept_paused_until = {};
                epoll_event ev{};
                ev.events = EPOLLIN;
                ev.data.fd = listen_fd;
                ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, listen_fd, &ev);
            }
            if (stopping) {
                if (!closed_listener) {
                    closed_listener = true;
                    ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, listen_fd, nullptr);
                    ::close(listen_fd);
                    listen_fd = -1;
                }
                std::vector<std::shared_ptr<Connection>> idle;
                for (auto& [fd, c] : conns)
                    if (c->phase != Connection::Phase::busy) idle.push_back(c);
                for (auto& c : idle) close_conn(c);
                if (busy == 0) break;
                if (!forced && now >= drain_deadline() + std::chrono::milliseconds(kForceAfterDrainMs)) {
                    forced = true;  // handlers past the deadline: their writes now fail at once
                    for (auto& [fd, c] : conns) ::shutdown(fd, SHUT_RDWR);
                }
            }
            check_deadlines(now);
        }
        std::vector<std::thread> threads;
        {
            std::lock_guard lk(mu);
            workers_exit = true;
            threads.swap(long_threads);
            for (auto& t : quick_threads) threads.push_back(std::move(t));
            quick_threads.clear();
        }
        cv.notify_all();
        for (auto& t : threads) t.join();
    }
};

Exchange::Exchange(Server& server, std::shared_ptr<Connection> conn, Request request)
    : server_(server), conn_(std::move(conn)), req_(std::move(request)) {}

Exchange::~Exchange() = default;

void Exchange::add_header(std::string name, std::string value) { headers_.emplace_back(std::move(name), std::move(value)); }

bool Exchange::client_gone() const { return conn_->gone.load(); }
bool Exchange::draining() const { return server_.impl_->stopping.load(); }
Clock::time_point Exchange::drain_deadline() const { return server_.impl_->drain_deadline(); }

std::string Exchange::head(int status, std::string_view content_type, const std::string& framing) const {
    const bool keep = req_.keep_alive && req_.minor_version == 1 && !draining();
    std::string h = "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason_phrase(status)) + "\r\n";
    if (!content_type.empty()) h += "Content-Type: " + std::string(content_type) + "\r\n";
    for (const auto& [name, value] : headers_) h += name + ": " + value + "\r\n";
    h += framing;
    h += keep ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    return h;
}

bool Exchange::send(std::string_view data) {
    if (failed_ || conn_->gone) return false;
    const int64_t timeout_ms = server_.impl_->opt.write_timeout_ms;
    auto progress = Clock::now();
    size_t off = 0;
    while (off < data.size()) {
        const ssize_t n = ::send(conn_->fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
        if (n > 0) {
            off += size_t(n);
            progress = Clock::now();
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && !conn_->gone &&
            ms_between(progress, Clock::now()) < timeout_ms) {
            pollfd p{conn_->fd, POLLOUT, 0};
            ::poll(&p, 1, 100);
            continue;
        }
        failed_ = true;  // reset, shut down at the drain deadline, or no progress for write_timeout_ms
        return false;
    }
    return true;
}

void Exchange::respond(int status, std::string_view content_type, std::string_view body) {
    if (responded()) return;
    status_ = status;
    const bool no_body = status == 204 || status == 304 || (status >= 100 && status < 200);
    std::string out = head(status, no_body ? "" : content_type,
                           no_body ? "" : "Content-Length: " + std::to_string(body.size()) + "\r\n");
    if (!no_body && req_.method != "HEAD") out.append(body);
    send(out);
}

bool Exchange::start_stream(int status, std::string_view content_type) {
    if (responded()) return false;
    status_ = status;
    streaming_ = true;
    // HTTP/1.0 has no chunked coding: the body ends when the connection closes
    return send(head(status, content_type, req_.minor_version == 1 ? "Transfer-Encoding: chunked\r\n" : ""));
}

bool Exchange::write(std::string_view data) {
    if (!streaming_ || ended_) return false;
    if (data.empty()) return !failed_ && !conn_->gone;
    if (req_.minor_version == 0) return send(data);
    char size[32];
    const int len = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    std::string chunk(size, size_t(len));
    chunk.append(data);
    chunk += "\r\n";
    return send(chunk);
}

void Exchange::end_stream() {
    if (!streaming_ || ended_) return;
    ended_ = true;
    if (req_.minor_version == 1) send("0\r\n\r\n");
}

Server::Server(ServerOptions options, Handler handler, std::function<bool(const Request&)> is_quick)
    : impl_(std::make_unique<Impl>()) {
    impl_->opt = std::move(options);
    impl_->handler = std::move(handler);
    impl_->is_quick = std::move(is_quick);
    impl_->owner = this;
}

Server::~Server() = default;

void Server::bind() {
    const auto& o = impl_->opt;
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    const std::string port = std::to_string(o.port);
    const int rc = ::getaddrinfo(o.host.c_str(), port.c_str(), &hints, &res);
    SLUICE_CHECK(rc == 0, "cannot listen on ", o.host, ":", o.port, ": ", ::gai_strerror(rc));
    std::string why = "no address";
    int fd = -1;
    for (addrinfo* a = res; a; a = a->ai_next) {
        fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        const int one = 1;
        ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) break;
        why = std::strerror(errno);
        ::close(fd);
        fd = -1;
    }
    ::freeaddrinfo(res);
    SLUICE_CHECK(fd >= 0, "cannot listen on ", o.host, ":", o.port, ": ", why,
                 " (address in use, or not an address of this machine)");
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                             : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    impl_->listen_fd = fd;
    impl_->epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
    impl_->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    SLUICE_CHECK(impl_->epoll_fd >= 0 && impl_->wake_fd >= 0, "cannot set up the HTTP event loop: ",
                 std::strerror(errno));
    for (int f : {impl_->listen_fd, impl_->wake_fd}) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.fd = f;
        ::epoll_ctl(impl_->epoll_fd, EPOLL_CTL_ADD, f, &ev);
    }
}

void Server::run() {
    SLUICE_CHECK(impl_->listen_fd >= 0, "HTTP server: run() before bind()");
    impl_->loop();
}

void Server::stop(std::chrono::milliseconds drain) {
    if (!impl_->stopping) {  // the deadline is set before the flag, so whoever sees the flag sees the deadline
        impl_->drain_deadline_ns = (Clock::now() + drain).time_since_epoch().count();
        impl_->stopping = true;
    }
    if (impl_->wake_fd >= 0) impl_->wake();
}

}  // namespace sluice::api::http
