// Fuzzes the HTTP/1.1 request parser (api/http/request_parser): the input is fed whole and again in pieces whose
// sizes come from the first input byte; both must end in the same state with the same request or error, consume the
// same bytes, and never hold a body over the limit.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "api/http/request_parser.h"

namespace {

using sluice::api::http::Limits;
using sluice::api::http::Request;
using sluice::api::http::RequestParser;

struct Outcome {
    std::vector<Request> requests;
    RequestParser::State state;
    int status = 0;
    size_t consumed = 0;
};

Outcome run(const uint8_t* data, size_t size, size_t piece) {
    Limits limits;
    limits.max_header_bytes = 2048;
    limits.max_headers = 16;
    limits.max_body_bytes = 4096;
    RequestParser p(limits);
    Outcome out;
    size_t at = 0;
    while (at < size) {
        const size_t n = std::min(piece, size - at);
        const size_t used = p.feed(reinterpret_cast<const char*>(data) + at, n);
        if (used > n) std::abort();
        at += used;
        if (p.state() == RequestParser::State::complete) {
            Request r = p.take();
            if (r.body.size() > limits.max_body_bytes) std::abort();
            out.requests.push_back(std::move(r));
            continue;
        }
        if (p.state() == RequestParser::State::error) break;
        if (used < n) std::abort();  // a parser that is neither done nor failed takes every byte it is given
    }
    out.state = p.state();
    out.status = p.error_status();
    out.consumed = at;
    return out;
}

bool same(const Request& a, const Request& b) {
    return a.method == b.method && a.target == b.target && a.path == b.path && a.query == b.query &&
           a.minor_version == b.minor_version && a.headers == b.headers && a.body == b.body &&
           a.keep_alive == b.keep_alive && a.expect_continue == b.expect_continue;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const size_t piece = size_t(data[0] % 17) + 1;
    const Outcome whole = run(data + 1, size - 1, size), pieces = run(data + 1, size - 1, piece);
    if (whole.state != pieces.state || whole.status != pieces.status || whole.consumed != pieces.consumed ||
        whole.requests.size() != pieces.requests.size())
        std::abort();
    for (size_t i = 0; i < whole.requests.size(); ++i)
        if (!same(whole.requests[i], pieces.requests[i])) std::abort();
    return 0;
}
