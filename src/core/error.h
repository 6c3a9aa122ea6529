// Errors. User-caused and environment failures throw sluice::Error with a message that names the file, field
// or offset; the CLI and the server catch it at their boundary and turn it into one line and a non-zero exit
// (or an HTTP status). Broken internal invariants use SLUICE_ASSERT, which is always on and aborts.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace sluice {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& what) : std::runtime_error(what) {}
};

template <typename... Args>
std::string cat(Args&&... args) {
    std::ostringstream os;
    if constexpr (sizeof...(Args) > 0) (os << ... << std::forward<Args>(args));
    return os.str();
}

template <typename... Args>
[[noreturn]] void fail(Args&&... args) {
    throw Error(cat(std::forward<Args>(args)...));
}

[[noreturn]] void assert_failed(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace sluice

// Throws sluice::Error built from the remaining arguments when cond is false.
#define SLUICE_CHECK(cond, ...)                 \
    do {                                        \
        if (!(cond)) ::sluice::fail(__VA_ARGS__); \
    } while (0)

// Internal invariant; never compiled out.
#define SLUICE_ASSERT(cond, ...)                                                          \
    do {                                                                                  \
        if (!(cond)) ::sluice::assert_failed(#cond, __FILE__, __LINE__, ::sluice::cat(__VA_ARGS__)); \
    } while (0)
