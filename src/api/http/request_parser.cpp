#include "api/http/request_parser.h"

#include <algorithm>
#include <cctype>

namespace sluice::api::http {

namespace {

bool is_tchar(unsigned char c) {
    return std::isalnum(c) || std::string_view("!#$%&'*+-.^_`|~").find(char(c)) != std::string_view::npos;
}
bool is_token(std::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return is_tchar(static_cast<unsigned char>(c)); });
}
// Field values: visible characters, spaces, tabs and obs-text; no other control characters (NUL, CR, LF, DEL).
bool is_field_value(std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char ch) {
        const auto c = static_cast<unsigned char>(ch);
        return c == '\t' || (c >= 0x20 && c != 0x7F);
    });
}
std::string lower(std::string_view s) {
    std::string out(s);
    for (auto& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
    return out;
}
std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}
// Comma-separated list elements, trimmed, empty ones dropped.
std::vector<std::string_view> list_elements(std::string_view s) {
    std::vector<std::string_view> out;
    while (true) {
        const size_t comma = s.find(',');
        const std::string_view e = trim(s.substr(0, comma));
        if (!e.empty()) out.push_back(e);
        if (comma == std::string_view::npos) return out;
        s.remove_prefix(comma + 1);
    }
}

constexpr size_t kMaxChunkLineBytes = 1024;

}  // namespace

const std::string* Request::header(std::string_view lower_name) const {
    for (const auto& [name, value] : headers)
        if (name == lower_name) return &value;
    return nullptr;
}

std::string Request::header_or(std::string_view lower_name, std::string fallback) const {
    const std::string* v = header(lower_name);
    return v ? *v : std::move(fallback);
}

bool RequestParser::fail(int status, std::string message) {
    state_ = State::error;
    error_status_ = status;
    error_message_ = std::move(message);
    return false;
}

Request RequestParser::take() {
    Request out = std::move(req_);
    req_ = Request{};
    state_ = State::headers;
    line_.clear();
    seen_ = 0;
    chunked_ = false;
    remaining_ = 0;
    chunk_ = Chunk::size_line;
    trailer_bytes_ = 0;
    return out;
}

size_t RequestParser::feed(const char* data, size_t n) {
    size_t used = 0;
    while (used < n && (state_ == State::headers || state_ == State::body)) {
        const size_t k = state_ == State::headers ? feed_headers(data + used, n - used) : feed_body(data + used, n - used);
        used += k;
        seen_ += k;
        if (k == 0) break;
    }
    return used;
}

size_t RequestParser::feed_headers(const char* data, size_t n) {
    size_t i = 0;
    for (; i < n; ++i) {
        const char c = data[i];
        // an empty line before the request line is skipped (RFC 9112 section 2.2)
        if (line_.empty() && (c == '\r' || c == '\n')) continue;
        if (line_.size() >= limits_.max_header_bytes) {
            fail(431, "the request headers are larger than " + std::to_string(limits_.max_header_bytes) + " bytes");
            return i;
        }
        line_.push_back(c);
        if (c != '\n') continue;
        if (line_.size() < 2 || line_[line_.size() - 2] != '\r') {
            fail(400, "bad request: a header line ends with a bare LF (CRLF required)");
            return i + 1;
        }
        if (line_.size() >= 4 && line_.compare(line_.size() - 4, 4, "\r\n\r\n") == 0) {
            ++i;
            if (parse_head()) {
                line_.clear();
                state_ = chunked_ || remaining_ > 0 ? State::body : State::complete;
            }
            return i;
        }
    }
    return i;
}

bool RequestParser::parse_head() {
    std::string_view head(line_);
    head.remove_suffix(4);  // the empty line
    std::vector<std::string_view> lines;
    for (size_t at = 0;;) {
        const size_t end = head.find("\r\n", at);
        lines.push_back(head.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at));
        if (end == std::string_view::npos) break;
        at = end + 2;
    }
    // request line: method SP target SP HTTP/1.x
    const std::string_view rl = lines[0];
    if (rl.find('\r') != std::string_view::npos) return fail(400, "bad request: a bare CR in the request line");
    const size_t sp1 = rl.find(' '), sp2 = sp1 == std::string_view::npos ? sp1 : rl.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos || rl.find(' ', sp2 + 1) != std::string_view::npos)
        return fail(400, "bad request: the request line is not 'METHOD TARGET HTTP/1.1'");
    const std::string_view method = rl.substr(0, sp1), target = rl.substr(sp1 + 1, sp2 - sp1 - 1),
                           version = rl.substr(sp2 + 1);
    if (!is_token(method)) return fail(400, "bad request: the method is not a token");
    if (target.empty() ||
        !std::all_of(target.begin(), target.end(), [](char c) { return static_cast<unsigned char>(c) > 0x20 && c != 0x7F; }))
        return fail(400, "bad request: the request target is empty or holds spaces or control characters");
    if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || !std::isdigit(static_cast<unsigned char>(version[5])) ||
        version[6] != '.' || !std::isdigit(static_cast<unsigned char>(version[7])))
        return fail(400, "bad request: the request line does not end with an HTTP version");
    if (version[5] != '1' || (version[7] != '0' && version[7] != '1'))
        return fail(505, "HTTP version " + std::string(version.substr(5)) + " is not supported (1.0 and 1.1 are)");
    req_.method = std::string(method);
    req_.target = std::string(target);
    req_.minor_version = version[7] - '0';
    std::string_view origin = target;
    if (target[0] != '/' && target != "*") {  // absolute-form: scheme://authority/path
        const size_t scheme = target.find("://");
        if (scheme == std::string_view::npos || !is_token(target.substr(0, scheme)))
            return fail(400, "bad request: the request target is neither a path nor an absolute URI");
        const size_t path = target.find('/', scheme + 3);
        origin = path == std::string_view::npos ? std::string_view("/") : target.substr(path);
    }
    const size_t q = origin.find('?');
    req_.path = std::string(origin.substr(0, q));
    req_.query = q == std::string_view::npos ? std::string() : std::string(origin.substr(q + 1));

    if (lines.size() - 1 > limits_.max_headers)
        return fail(431, "the request has more than " + std::to_string(limits_.max_headers) + " header fields");
    for (size_t i = 1; i < lines.size(); ++i) {
        const std::string_view l = lines[i];
        if (!l.empty() && (l[0] == ' ' || l[0] == '\t'))
            return fail(400, "bad request: obsolete line folding in header field " + std::to_string(i));
        const size_t colon = l.find(':');
        if (colon == std::string_view::npos || !is_token(l.substr(0, colon)))
            return fail(400, "bad request: header line " + std::to_string(i) + " is not 'Name: value'");
        const std::string_view value = trim(l.substr(colon + 1));
        if (!is_field_value(value))
            return fail(400, "bad request: header " + std::string(l.substr(0, colon)) + " holds a control character");
        req_.headers.emplace_back(lower(l.substr(0, colon)), std::string(value));
    }

    // framing: Transfer-Encoding chunked, or Content-Length, or no body
    std::vector<std::string_view> codings, lengths;
    std::vector<std::string> connection;
    for (const auto& [name, value] : req_.headers) {
        if (name == "transfer-encoding")
            for (auto e : list_elements(value)) codings.push_back(e);
        else if (name == "content-length")
            for (auto e : list_elements(value)) lengths.push_back(e);
        else if (name == "connection")
            for (auto e : list_elements(value)) connection.push_back(lower(e));
        else if (name == "expect") {
            if (lower(value) != "100-continue")
                return fail(417, "the Expect header asks for '" + value + "'; only 100-continue is supported");
            req_.expect_continue = true;
        }
    }
    if (req_.minor_version == 1 && !req_.header("host"))
        return fail(400, "bad request: an HTTP/1.1 request needs a Host header");
    const bool close = std::find(connection.begin(), connection.end(), "close") != connection.end();
    const bool keep = std::find(connection.begin(), connection.end(), "keep-alive") != connection.end();
    req_.keep_alive = req_.minor_version == 1 ? !close : keep && !close;
    if (!codings.empty() || req_.header("transfer-encoding")) {
        if (!lengths.empty() || req_.header("content-length"))
            return fail(400, "bad request: both Transfer-Encoding and Content-Length are set");
        if (req_.minor_version == 0) return fail(400, "bad request: Transfer-Encoding in an HTTP/1.0 request");
        if (codings.size() != 1 || lower(codings[0]) != "chunked")
            return fail(501, "Transfer-Encoding: only 'chunked' is supported");
        chunked_ = true;
        return true;
    }
    if (!lengths.empty() || req_.header("content-length")) {
        if (lengths.empty()) return fail(400, "bad request: Content-Length is empty");
        for (auto l : lengths)
            if (l != lengths[0]) return fail(400, "bad request: different Content-Length values");
        const std::string_view l = lengths[0];
        if (!std::all_of(l.begin(), l.end(), [](char c) { return c >= '0' && c <= '9'; }))
            return fail(400, "bad request: Content-Length '" + std::string(l) + "' is not a number of bytes");
        // more digits than the limit has is over it, however many there are (no overflow)
        const std::string max = std::to_string(limits_.max_body_bytes);
        std::string_view digits = l;
        while (digits.size() > 1 && digits[0] == '0') digits.remove_prefix(1);
        if (digits.size() > max.size() || (digits.size() == max.size() && digits > max))
            return fail(413, "the request body is larger than " + max + " bytes");
        remaining_ = std::stoull(std::string(digits));
    }
    return true;
}

size_t RequestParser::feed_body(const char* data, size_t n) {
    if (chunked_) return feed_chunked(data, n);
    const size_t k = size_t(std::min<uint64_t>(remaining_, n));
    req_.body.append(data, k);
    remaining_ -= k;
    if (remaining_ == 0) state_ = State::complete;
    return k;
}

size_t RequestParser::feed_chunked(const char* data, size_t n) {
    size_t i = 0;
    while (i < n && state_ == State::body) {
        if (chunk_ == Chunk::data) {
            const size_t k = size_t(std::min<uint64_t>(remaining_, n - i));
            req_.body.append(data + i, k);
            remaining_ -= k;
            i += k;
            if (remaining_ == 0) chunk_ = Chunk::data_crlf;
            continue;
        }
        const char c = data[i++];
        line_.push_back(c);
        if (chunk_ == Chunk::data_crlf) {
            if (c != "\r\n"[line_.size() - 1]) {
                fail(400, "bad request: a chunk's data is not followed by CRLF");
                return i;
            }
            if (line_.size() == 2) {
                line_.clear();
                chunk_ = Chunk::size_line;
            }
            continue;
        }
        const size_t cap = chunk_ == Chunk::size_line ? kMaxChunkLineBytes : limits_.max_header_bytes;
        if (chunk_ == Chunk::trailers && ++trailer_bytes_ > cap) {
            fail(431, "the chunked body's trailers are larger than " + std::to_string(cap) + " bytes");
            return i;
        }
        if (c != '\n') {
            if (chunk_ == Chunk::size_line && line_.size() > cap) {
                fail(400, "bad request: a chunk-size line is longer than " + std::to_string(cap) + " bytes");
                return i;
            }
            continue;
        }
        if (line_.size() < 2 || line_[line_.size() - 2] != '\r') {
            fail(400, "bad request: a chunked body line ends with a bare LF (CRLF required)");
            return i;
        }
        const std::string_view l(line_.data(), line_.size() - 2);
        if (chunk_ == Chunk::trailers) {
            if (l.empty()) {
                state_ = State::complete;
            } else if (l.find(':') == std::string_view::npos || !is_token(l.substr(0, l.find(':')))) {
                fail(400, "bad request: a trailer line is not 'Name: value'");
                return i;
            }
            line_.clear();
            continue;
        }
        // chunk-size [; extensions]
        size_t digits = 0;
        uint64_t size = 0;
        while (digits < l.size() && std::isxdigit(static_cast<unsigned char>(l[digits]))) {
            if (digits == 15) {  // 2^60 and more is over any limit; stop before the value overflows
                fail(413, "the request body is larger than " + std::to_string(limits_.max_body_bytes) + " bytes");
                return i;
            }
            const char h = char(std::tolower(static_cast<unsigned char>(l[digits])));
            size = size * 16 + uint64_t(h <= '9' ? h - '0' : h - 'a' + 10);
            ++digits;
        }
        const std::string_view rest = trim(l.substr(digits));
        if (digits == 0 || (!rest.empty() && rest[0] != ';')) {
            fail(400, "bad request: chunk size '" + std::string(l.substr(0, 32)) + "' is not a hex number");
            return i;
        }
        line_.clear();
        if (size == 0) {
            chunk_ = Chunk::trailers;
            continue;
        }
        if (size > limits_.max_body_bytes - req_.body.size()) {
            fail(413, "the request body is larger than " + std::to_string(limits_.max_body_bytes) + " bytes");
            return i;
        }
        remaining_ = size;
        chunk_ = Chunk::data;
    }
    return i;
}

}  // namespace sluice::api::http
