// Small helpers shared by the subcommands: id-list parsing and common flags.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::cli {

// "5,17,3" -> {5, 17, 3}; errors name the offending item.
std::vector<int32_t> parse_ids(const std::string& text);

std::string json_escape(const std::string& s);

}  // namespace sluice::cli
