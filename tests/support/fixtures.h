// The transformers-made model fixtures under tests/data/fixtures, for the tests that run every one of them: the
// folders (those with a ref.json, sorted so test names are stable), a folder's prompt ids from its ref.json, and
// the gtest name of a folder parameter.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace sluice::test {

inline std::vector<std::string> fixture_dirs() {
    namespace fs = std::filesystem;
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(std::string(SLUICE_TEST_DATA_DIR) + "/fixtures"))
        if (fs::exists(e.path() / "ref.json") && fs::exists(e.path() / "config.json")) out.push_back(e.path().string());
    std::sort(out.begin(), out.end());
    return out;
}

inline std::vector<int32_t> fixture_prompt(const std::string& dir) {
    std::ifstream f(dir + "/ref.json");
    return nlohmann::json::parse(f)["ids"].get<std::vector<int32_t>>();
}

inline std::string fixture_name(const ::testing::TestParamInfo<std::string>& info) {
    return std::filesystem::path(info.param).filename().string();
}

}  // namespace sluice::test
