// Shared by the fuzz targets of a parser with a round trip (packed manifest, plan rates, usage stats): the parse of
// the input as text, where sluice::Error (the input rejected) is the only acceptable failure; anything else reaches
// libFuzzer as a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "core/error.h"

namespace sluice::fuzz {

// parse(the input as a string), or nullopt when it throws sluice::Error.
template <typename Parse>
auto parse_or_reject(const uint8_t* data, size_t size, Parse&& parse)
    -> std::optional<decltype(parse(std::string()))> {
    try {
        return parse(std::string(reinterpret_cast<const char*>(data), size));
    } catch (const Error&) {
        return std::nullopt;
    }
}

}  // namespace sluice::fuzz
