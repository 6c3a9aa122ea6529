// `sluice inspect -m FILE.gguf` on the gguf-py fixtures: JSON and text reports, and one plain error line for a
// broken file.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../support/st_builder.h"
#include "../support/test_util.h"

namespace {
const std::string kDir = std::string(SLUICE_TEST_DATA_DIR) + "/gguf";

std::string run(const std::string& args, int* status, bool with_stderr = false) {
    return sluice::test::run_command(std::string(SLUICE_BINARY) + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null"),
                                     status);
}
}  // namespace

TEST(CliGguf, InspectJson) {
    int status = -1;
    const auto j = nlohmann::json::parse(run("inspect -m " + kDir + "/basic.gguf --json", &status));
    ASSERT_EQ(status, 0);
    EXPECT_EQ(j["format"], "gguf");
    EXPECT_EQ(j["version"], 3);
    EXPECT_EQ(j["architecture"], "llama");
    EXPECT_EQ(j["name"], "sluice gguf fixture \xc3\xa9\xe4\xb8\xad");
    EXPECT_EQ(j["tensor_count"], 10);
    EXPECT_EQ(j["alignment"], 32);
    // F32: f32.weight 128 + norm.weight 64 + cube.weight 96; Q4_K: 3 rows of 2 blocks of 144
    EXPECT_EQ(j["bytes_by_type"]["F32"], 128 + 64 + 96);
    EXPECT_EQ(j["bytes_by_type"]["Q4_K"], 3 * 2 * 144);
    EXPECT_EQ(j["bytes_by_type"]["MXFP4"], 4 * 2 * 17);
    std::map<std::string, bool> supported;
    for (const auto& t : j["types"]) supported[t["type"]] = t["supported"];
    EXPECT_EQ(supported.size(), 8u);
    EXPECT_TRUE(supported["Q6_K"]);
    EXPECT_TRUE(supported["BF16"]);
    EXPECT_FALSE(supported["Q5_K"]);
    EXPECT_EQ(j["metadata"]["test.u64"], UINT64_MAX);
    EXPECT_EQ(j["metadata"]["test.i8"], -128);
    EXPECT_EQ(j["metadata"]["test.bool_true"], true);
    EXPECT_EQ(j["metadata"]["test.arr_string"], "string[4]");
    EXPECT_EQ(j["metadata"]["test.arr_nested"], "array[2]");
}

TEST(CliGguf, InspectText) {
    int status = -1;
    const std::string out = run("inspect -m " + kDir + "/aligned64.gguf", &status);
    ASSERT_EQ(status, 0);
    EXPECT_NE(out.find("(GGUF v3, 448 B, alignment 64)"), std::string::npos) << out;
    EXPECT_NE(out.find("architecture     llama"), std::string::npos) << out;
    EXPECT_NE(out.find("tensors          2, 88 B of data"), std::string::npos) << out;
    EXPECT_NE(out.find("Q8_0"), std::string::npos) << out;
    EXPECT_NE(out.find("general.alignment"), std::string::npos) << out;
    EXPECT_NE(out.find("supported"), std::string::npos) << out;
}

// A GGUF that is cut short, found by its magic even without the .gguf name.
TEST(CliGguf, BrokenFileIsOneErrorLine) {
    std::ifstream in(kDir + "/basic.gguf", std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string path = sluice::test::temp_dir("cli_gguf") + "/cut.bin";
    std::ofstream(path, std::ios::binary) << ss.str().substr(0, 1000);
    int status = 0;
    const std::string out = run("inspect -m " + path, &status, true);
    EXPECT_EQ(status, 1) << out;
    EXPECT_EQ(out.rfind("sluice: error: " + path + ": offset ", 0), 0u) << out;
    EXPECT_EQ(out.find('\n'), out.size() - 1) << out;
}
