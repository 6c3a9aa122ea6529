// HTTP/1.1 request parsing (RFC 9112), incremental: bytes are fed as they arrive and every limit is checked as soon
// as the bytes that break it are seen, whatever the framing. A Content-Length over the body limit is refused when
// the headers end (before any body byte is read); a chunked body is refused at the chunk-size line that would take
// it over the limit, so no transfer encoding can make the server hold more than `max_body_bytes` of body.
//
// What is refused, with the status a client gets: a request line or headers over max_header_bytes, or more than
// max_headers fields (431); a malformed request line, header line, Content-Length or chunk (400); Content-Length
// together with Transfer-Encoding, or two different Content-Lengths (400: request smuggling); a transfer coding other
// than a single `chunked` (501); an HTTP version other than 1.0 / 1.1 (505); a body over the limit (413).
// Obsolete line folding and bare LF line ends are refused (400), as RFC 9112 allows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::api::http {

struct Limits {
    size_t max_header_bytes = 64 << 10;  // request line + header fields (and, separately, a chunked body's trailers)
    size_t max_headers = 100;
    uint64_t max_body_bytes = 16u << 20;
};

struct Request {
    std::string method;  // as sent (methods are case-sensitive)
    std::string target;  // the request target as sent
    std::string path;    // target without the query ("/v1/completions"); an absolute-form target loses its authority
    std::string query;   // after '?', without it
    int minor_version = 1;  // HTTP/1.minor
    std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, values trimmed, in order
    std::string body;       // de-chunked
    bool keep_alive = true;        // HTTP/1.1 unless "Connection: close"; HTTP/1.0 only with "keep-alive"
    bool expect_continue = false;  // "Expect: 100-continue"

    // The first field named `lower_name` (give it lower-case), or null.
    const std::string* header(std::string_view lower_name) const;
    std::string header_or(std::string_view lower_name, std::string fallback = {}) const;
};

class RequestParser {
public:
    enum class State {
        headers,   // reading the request line and header fields
        body,      // headers done (see request()), reading the body
        complete,  // request() is whole; take() it, then the parser reads the next request
        error,     // error_status() / error_message() say why; the connection must be closed after answering
    };

    explicit RequestParser(Limits limits) : limits_(limits) {}

    // Consumes what it can of data[0, n) and returns how many bytes it took. It stops at the end of a request
    // (bytes after it, a pipelined request, are left to the caller) and on an error.
    size_t feed(const char* data, size_t n);

    State state() const { return state_; }
    bool headers_done() const { return state_ == State::body || state_ == State::complete; }
    const Request& request() const { return req_; }  // valid once headers_done()
    Request take();                                   // the complete request; the parser is reset for the next one

    int error_status() const { return error_status_; }
    const std::string& error_message() const { return error_message_; }
    size_t bytes_seen() const { return seen_; }  // since the last take(): 0 means the next request has not started

private:
    enum class Chunk { size_line, data, data_crlf, trailers };

    size_t feed_headers(const char* data, size_t n);
    size_t feed_body(const char* data, size_t n);
    size_t feed_chunked(const char* data, size_t n);
    bool parse_head();  // request line + fields in line_; sets the framing
    bool fail(int status, std::string message);

    Limits limits_;
    State state_ = State::headers;
    Request req_;
    std::string line_;  // the head being collected (headers), or one chunk-size / trailer line
    size_t seen_ = 0;
    bool chunked_ = false;
    uint64_t remaining_ = 0;  // Content-Length bytes, or the current chunk's data bytes, still to come
    Chunk chunk_ = Chunk::size_line;
    size_t trailer_bytes_ = 0;
    int error_status_ = 0;
    std::string error_message_;
};

}  // namespace sluice::api::http
