// Python str operations the chat templates rely on (strip, split, replace, title, %-formatting, int()/float()
// parsing), implemented on UTF-8 with code-point semantics. Case mapping covers ASCII only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace sluice::jinja {

bool py_isspace(char32_t c);
bool py_is_alnum_or_underscore(char32_t c);
std::string ascii_lower(const std::string& s);
std::string ascii_upper(const std::string& s);
std::string py_capitalize(const std::string& s);
std::string py_title(const std::string& s);
// str.strip/lstrip/rstrip; chars == nullptr strips whitespace.
std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right);
std::vector<std::string> py_split(const std::string& s, const std::string* sep, int64_t maxsplit);
std::vector<std::string> py_rsplit(const std::string& s, const std::string* sep, int64_t maxsplit);
std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count);
std::string py_indent(const std::string& s, const std::string& pad, bool first, bool blank);
std::string html_escape(const std::string& s);
// "fmt % args" with %s %r %d %i %f %% (args is a tuple or a single value).
std::string percent_format(const std::string& fmt, const Value& args);
std::optional<int64_t> py_parse_int(const std::string& s, int64_t base);
std::optional<double> py_parse_float(const std::string& s);

}  // namespace sluice::jinja
