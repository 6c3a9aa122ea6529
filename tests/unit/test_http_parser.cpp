// The HTTP/1.1 request parser (api/http/request_parser): framing, limits for every transfer encoding, pipelining,
// and the same result however the bytes are split.
#include <gtest/gtest.h>

#include <string>

#include "api/http/request_parser.h"

namespace sluice::api::http {
namespace {

Limits small_limits() {
    Limits l;
    l.max_header_bytes = 256;
    l.max_headers = 8;
    l.max_body_bytes = 100;
    return l;
}

struct Fed {
    RequestParser::State state;
    int status = 0;
    std::string message;
    size_t used = 0;
    Request req;
};

// Feeds `bytes` in pieces of `piece` bytes (0: whole) until the parser completes or fails.
Fed feed(const std::string& bytes, size_t piece = 0, Limits limits = small_limits()) {
    RequestParser p(limits);
    Fed out;
    size_t at = 0;
    while (at < bytes.size()) {
        const size_t n = piece == 0 ? bytes.size() - at : std::min(piece, bytes.size() - at);
        const size_t used = p.feed(bytes.data() + at, n);
        at += used;
        if (p.state() == RequestParser::State::complete || p.state() == RequestParser::State::error) break;
        if (used < n) break;
    }
    out.state = p.state();
    out.status = p.error_status();
    out.message = p.error_message();
    out.used = at;
    if (out.state == RequestParser::State::complete) out.req = p.take();
    return out;
}

TEST(HttpParser, GetWithHeaders) {
    const Fed f = feed("GET /v1/models?x=1 HTTP/1.1\r\nHost: a\r\nX-Thing:  spaced value \r\n\r\n");
    ASSERT_EQ(f.state, RequestParser::State::complete);
    EXPECT_EQ(f.req.method, "GET");
    EXPECT_EQ(f.req.path, "/v1/models");
    EXPECT_EQ(f.req.query, "x=1");
    EXPECT_EQ(f.req.header_or("x-thing"), "spaced value");
    EXPECT_TRUE(f.req.keep_alive);
    EXPECT_EQ(f.req.header("missing"), nullptr);
}

TEST(HttpParser, ContentLengthBodyAndPipelinedLeftover) {
    const std::string two = "POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhelloGET /b HTTP/1.1\r\n";
    const Fed f = feed(two);
    ASSERT_EQ(f.state, RequestParser::State::complete);
    EXPECT_EQ(f.req.body, "hello");
    EXPECT_EQ(two.substr(f.used), "GET /b HTTP/1.1\r\n");  // the next request is left to the caller
}

TEST(HttpParser, ChunkedBodyWithExtensionsAndTrailers) {
    const std::string req =
        "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;name=v\r\nhello\r\nA\r\n0123456789\r\n"
        "0\r\nX-T: 1\r\n\r\n";
    for (size_t piece : {0, 1, 2, 3, 7}) {
        const Fed f = feed(req, piece);
        ASSERT_EQ(f.state, RequestParser::State::complete) << piece;
        EXPECT_EQ(f.req.body, "hello0123456789") << piece;
        EXPECT_EQ(f.used, req.size());
    }
}

TEST(HttpParser, BodyLimitHoldsForEveryFraming) {
    // Content-Length over the limit: refused when the headers end, before any body byte
    Fed f = feed("POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 101\r\n\r\n");
    EXPECT_EQ(f.status, 413);
    f = feed("POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999999\r\n\r\n");
    EXPECT_EQ(f.status, 413);
    f = feed("POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 000000000000000000000000100\r\n\r\n" + std::string(100, 'x'));
    EXPECT_EQ(f.state, RequestParser::State::complete);
    // chunked: refused at the chunk-size line that would pass the limit (no data byte of it read)
    const std::string head = "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
    f = feed(head + "60\r\n" + std::string(0x60, 'x') + "\r\n5\r\n");
    EXPECT_EQ(f.status, 413);
    EXPECT_EQ(f.used, head.size() + 4 + 0x60 + 2 + 3);
    f = feed(head + "ffffffffffffffffffffffff\r\n");
    EXPECT_EQ(f.status, 413);
    f = feed(head + "64\r\n" + std::string(100, 'x') + "\r\n0\r\n\r\n");
    EXPECT_EQ(f.state, RequestParser::State::complete);
}

TEST(HttpParser, RefusesWithTheRightStatus) {
    const struct {
        std::string bytes;
        int status;
    } cases[] = {
        {"GET / HTTP/1.1\r\n\r\n", 400},                                      // no Host
        {"GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505},
        {"GET / HTTP/1.1\nHost: a\n\n", 400},                                 // bare LF
        {"GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
        {"G(T / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: a\x01\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
        {"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: a\r\nExpect: something\r\n\r\n", 417},
        {"GET / HTTP/1.1\r\nHost: a\r\nX: " + std::string(300, 'a') + "\r\n\r\n", 431},
        {"GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\nE: 1\r\nF: 1\r\nG: 1\r\nH: 1\r\n\r\n", 431},
        {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nbad trailer\r\n\r\n", 400},
    };
    for (const auto& c : cases)
        for (size_t piece : {0, 1}) {
            const Fed f = feed(c.bytes, piece);
            EXPECT_EQ(f.state, RequestParser::State::error) << c.bytes;
            EXPECT_EQ(f.status, c.status) << c.bytes << " -> " << f.message;
            EXPECT_FALSE(f.message.empty());
        }
}

TEST(HttpParser, ConnectionAndExpect) {
    Fed f = feed("GET / HTTP/1.1\r\nHost: a\r\nConnection: Close\r\n\r\n");
    EXPECT_FALSE(f.req.keep_alive);
    f = feed("GET / HTTP/1.0\r\n\r\n");
    EXPECT_FALSE(f.req.keep_alive);
    f = feed("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    EXPECT_TRUE(f.req.keep_alive);
    f = feed("POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\nx");
    EXPECT_TRUE(f.req.expect_continue);
    f = feed("GET http://example.com HTTP/1.1\r\nHost: a\r\n\r\n");
    EXPECT_EQ(f.req.path, "/");
}

TEST(HttpParser, HeadersDoneBeforeTheBody) {
    RequestParser p(small_limits());
    const std::string head = "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\n";
    EXPECT_EQ(p.feed(head.data(), head.size()), head.size());
    EXPECT_EQ(p.state(), RequestParser::State::body);
    EXPECT_TRUE(p.headers_done());
    EXPECT_EQ(p.request().path, "/x");
    EXPECT_EQ(p.feed("abc", 3), 3u);
    EXPECT_EQ(p.state(), RequestParser::State::complete);
    EXPECT_EQ(p.take().body, "abc");
    EXPECT_EQ(p.bytes_seen(), 0u);
    EXPECT_EQ(p.state(), RequestParser::State::headers);
}

}  // namespace
}  // namespace sluice::api::http
