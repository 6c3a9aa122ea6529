#include <gtest/gtest.h>

#include <filesystem>

#include "../support/st_builder.h"
#include "../support/test_util.h"
#include "core/error.h"
#include "formats/checkpoint.h"
#include "formats/safetensors.h"

using namespace sluice;
using namespace sluice::test;

namespace {
std::string parse_error(const std::string& bytes) {
    return test::error_of([&] {
        parse_safetensors_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "f.safetensors");
    });
}
}  // namespace

TEST(Safetensors, ParsesValidHeader) {
    auto bytes = safetensors_from({{"a", "F32", {2, 3}, {1, 2, 3, 4, 5, 6}}, {"b", "BF16", {4}, {1, 2, 3, 4}}});
    auto h = parse_safetensors_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "x");
    ASSERT_EQ(h.tensors.size(), 2u);
    EXPECT_EQ(h.tensors[0].name, "a");
    EXPECT_EQ(h.tensors[0].shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(h.tensors[1].dtype, DType::BF16);
    EXPECT_EQ(h.tensors[1].nbytes(), 8u);
    EXPECT_EQ(h.data_offset % 8, 0u);
}

TEST(Safetensors, EmptyAndScalarTensors) {
    auto bytes = safetensors_bytes(
        R"({"e":{"dtype":"F32","shape":[0,4],"data_offsets":[0,0]},"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})",
        std::string(4, '\0'));
    auto h = parse_safetensors_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "x");
    EXPECT_EQ(h.tensors.size(), 2u);
}

TEST(Safetensors, RejectsBadHeaders) {
    const std::string ok_data(16, '\0');
    struct Case {
        std::string bytes, expect;
    } cases[] = {
        {"abc", "too short"},
        {std::string("\xff\xff\xff\xff\x00\x00\x00\x00", 8), "exceeds"},
        {std::string("\x10\x00\x00\x00\x00\x00\x00\x00{}", 10), "past the end"},
        {safetensors_bytes("{not json", ok_data), "not valid JSON"},
        {safetensors_bytes("[1,2]", ok_data), "not an object"},
        {safetensors_bytes(R"({"a":{"dtype":"F12","shape":[4],"data_offsets":[0,16]}})", ok_data), "unknown dtype 'F12'"},
        {safetensors_bytes(R"({"a":{"shape":[4],"data_offsets":[0,16]}})", ok_data), "'dtype'"},
        {safetensors_bytes(R"({"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", ok_data), "non-negative"},
        {safetensors_bytes(R"({"a":{"dtype":"F32","shape":[4.5],"data_offsets":[0,16]}})", ok_data), "non-negative"},
        {safetensors_bytes(R"({"a":{"dtype":"F32","shape":[4]}})", ok_data), "data_offsets"},
        {safetensors_bytes(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[16,0]}})", ok_data), "< begin"},
        {safetensors_bytes(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,32]}})", ok_data), "run past"},
        {safetensors_bytes(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", ok_data), "12 bytes but"},
        {safetensors_bytes(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                           ok_data), "overlap"},
        {safetensors_bytes(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,16]}})", ok_data),
         "too large"},
        {safetensors_bytes(R"({"__metadata__":{"format":3}})", ok_data), "__metadata__.format"},
    };
    for (const auto& c : cases) {
        const std::string err = parse_error(c.bytes);
        EXPECT_NE(err.find(c.expect), std::string::npos) << "expected '" << c.expect << "' in: " << err;
        if (!err.empty()) {
            EXPECT_EQ(err.rfind("f.safetensors", 0), 0u) << err;
        }
    }
}

TEST(Checkpoint, SingleFileAndShapeChecks) {
    auto dir = temp_dir("ck_single");
    write_file(dir + "/model.safetensors", safetensors_from({{"w", "F32", {2, 2}, {1, 2, 3, 4}}}));
    Checkpoint ck(dir);
    EXPECT_TRUE(ck.has("w"));
    auto v = ck.get("w", {2, 2});
    float f;
    std::memcpy(&f, v.data + 12, 4);
    EXPECT_EQ(f, 4.0f);
    try {
        ck.get("w", {4});
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("has shape [2, 2], expected [4]"), std::string::npos) << e.what();
    }
    try {
        ck.get("missing");
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("'missing' not found"), std::string::npos);
    }
}

TEST(Checkpoint, ShardedIndex) {
    auto dir = temp_dir("ck_sharded");
    write_file(dir + "/model-00001-of-00002.safetensors", safetensors_from({{"a", "F32", {1}, {1}}}));
    write_file(dir + "/model-00002-of-00002.safetensors", safetensors_from({{"b", "BF16", {2}, {2, 3}}}));
    write_file(dir + "/model.safetensors.index.json",
               R"({"metadata":{"total_size":8},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}})");
    Checkpoint ck(dir);
    EXPECT_EQ(ck.files().size(), 2u);
    EXPECT_EQ(ck.get("b").dtype(), DType::BF16);
    EXPECT_EQ(ck.total_bytes(), 8u);
}

TEST(Checkpoint, BadFolders) {
    auto expect_error = [](const std::string& dir, const std::string& needle) {
        try {
            Checkpoint ck(dir);
            ADD_FAILURE() << "no error for " << dir;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    expect_error("/nonexistent/sluice", "not a directory");
    auto empty = temp_dir("ck_empty");
    expect_error(empty, "no model.safetensors");

    auto missing_shard = temp_dir("ck_missing_shard");
    write_file(missing_shard + "/model.safetensors.index.json", R"({"weight_map":{"a":"model-00001-of-00002.safetensors"}})");
    expect_error(missing_shard, "does not exist");

    auto wrong_tensor = temp_dir("ck_wrong_tensor");
    write_file(wrong_tensor + "/s.safetensors", safetensors_from({{"a", "F32", {1}, {1}}}));
    write_file(wrong_tensor + "/model.safetensors.index.json", R"({"weight_map":{"zz":"s.safetensors"}})");
    expect_error(wrong_tensor, "does not contain it");

    auto bad_json = temp_dir("ck_bad_index");
    write_file(bad_json + "/model.safetensors.index.json", R"({"weight_map": )");
    expect_error(bad_json, "not valid JSON");

    auto escape = temp_dir("ck_escape");
    write_file(escape + "/model.safetensors.index.json", R"({"weight_map":{"a":"../x.safetensors"}})");
    expect_error(escape, "plain file name");

    auto truncated = temp_dir("ck_truncated");
    auto bytes = safetensors_from({{"w", "F32", {4}, {1, 2, 3, 4}}});
    write_file(truncated + "/model.safetensors", bytes.substr(0, bytes.size() - 3));
    expect_error(truncated, "run past the data buffer");
}
