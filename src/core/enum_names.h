// Names of an enum whose values are 0..N-1, as an array in the enum's order: the name of a value and the value of
// a name, for the enums that options and reports spell out.
#pragma once

#include <cstddef>
#include <string>

#include "core/error.h"

namespace sluice {

// names[v], or `unknown` for a value outside the array.
template <class E, size_t N>
const char* enum_name(const char* const (&names)[N], E v, const char* unknown = "?") {
    return size_t(v) < N ? names[size_t(v)] : unknown;
}

// The value named `name`; else throws "unknown WHAT 'NAME' (expected a, b or c)".
template <class E, size_t N>
E parse_enum(const char* const (&names)[N], const std::string& name, const char* what) {
    std::string expected;
    for (size_t i = 0; i < N; ++i) {
        if (name == names[i]) return E(i);
        expected += i == 0 ? "" : i + 1 == N ? " or " : ", ";
        expected += names[i];
    }
    fail("unknown ", what, " '", name, "' (expected ", expected, ")");
}

}  // namespace sluice
