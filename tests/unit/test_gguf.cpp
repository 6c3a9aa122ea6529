// The GGUF reader against files written by llama.cpp's gguf-py (tests/data/gguf, made by
// tools/reference/make_gguf_fixtures.py): every key/value and tensor info as GGUFReader reads them, every tensor's
// first rows as gguf.quants.dequantize computes them. The bad inputs are in test_gguf_errors.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/gguf.h"
#include "ops/ops.h"
#include "../support/test_util.h"

using namespace sluice;
using nlohmann::json;

namespace {

const std::string kDir = std::string(SLUICE_TEST_DATA_DIR) + "/gguf";

json expected() {
    std::ifstream f(kDir + "/expected.json");
    return json::parse(f);
}

GgufType type_from_name(const std::string& s) {
    static const char* names[] = {"UINT8", "INT8",   "UINT16", "INT16",  "UINT32", "INT32",  "FLOAT32",
                                  "BOOL",  "STRING", "ARRAY",  "UINT64", "INT64",  "FLOAT64"};
    for (uint32_t i = 0; i < 13; ++i)
        if (s == names[i]) return GgufType(i);
    ADD_FAILURE() << "unknown type name " << s;
    return GgufType::UINT8;
}

void expect_value(const GgufValue& v, const json& j, const std::string& where) {
    switch (v.type) {
        case GgufType::STRING:
            EXPECT_EQ(v.str, j.get<std::string>()) << where;
            break;
        case GgufType::BOOL:
            EXPECT_EQ(v.bits != 0, j.get<bool>()) << where;
            break;
        case GgufType::FLOAT32:
        case GgufType::FLOAT64:
            EXPECT_EQ(v.as_f64(), j.get<double>()) << where;
            break;  // exact
        case GgufType::UINT8:
        case GgufType::UINT16:
        case GgufType::UINT32:
        case GgufType::UINT64:
            EXPECT_EQ(v.as_u64(), j.get<uint64_t>()) << where;
            break;
        case GgufType::ARRAY: {
            const GgufArray& a = *v.array;
            EXPECT_EQ(a.type, type_from_name(j["elem_type"])) << where;
            ASSERT_EQ(a.count, j["items"].size()) << where;
            for (uint64_t i = 0; i < a.count; ++i)
                expect_value(a.at(i), j["items"][i], where + "[" + std::to_string(i) + "]");
            break;
        }
        default:
            EXPECT_EQ(v.as_i64(), j.get<int64_t>()) << where;
            break;
    }
}

void expect_file_matches(const std::string& file, const json& e) {
    SCOPED_TRACE(file);
    GgufFile f = GgufFile::open(kDir + "/" + file);
    EXPECT_EQ(f.version(), 3u);
    EXPECT_EQ(f.alignment(), e["alignment"].get<uint64_t>());
    EXPECT_EQ(f.data_offset(), e["data_offset"].get<uint64_t>());
    ASSERT_EQ(f.metadata().size(), e["metadata"].size());
    for (const auto& m : e["metadata"]) {
        const std::string key = m["key"];
        const GgufValue* v = f.find(key);
        ASSERT_NE(v, nullptr) << key;
        EXPECT_EQ(v->type, type_from_name(m["type"])) << key;
        expect_value(*v, m["value"], key);
    }
    ASSERT_EQ(f.tensors().size(), e["tensors"].size());
    for (size_t i = 0; i < f.tensors().size(); ++i) {
        const GgufTensorInfo& t = f.tensors()[i];
        const json& et = e["tensors"][i];
        EXPECT_EQ(t.name, et["name"].get<std::string>());
        EXPECT_EQ(f.tensor(t.name), &t);
        const auto ne = et["ne"].get<std::vector<uint64_t>>();
        ASSERT_EQ(t.n_dims, ne.size()) << t.name;
        for (size_t d = 0; d < 4; ++d) EXPECT_EQ(t.ne[d], d < ne.size() ? ne[d] : 1u) << t.name << " ne[" << d << "]";
        EXPECT_EQ(t.type, et["type"].get<uint32_t>()) << t.name;
        EXPECT_EQ(ggml_type_label(t.type), et["type_name"].get<std::string>()) << t.name;
        EXPECT_EQ(t.offset, et["offset"].get<uint64_t>()) << t.name;
        EXPECT_EQ(t.file_offset, et["file_offset"].get<uint64_t>()) << t.name;
        ASSERT_TRUE(t.nbytes.has_value()) << t.name;
        EXPECT_EQ(*t.nbytes, et["nbytes"].get<uint64_t>()) << t.name;
        EXPECT_EQ(f.tensor_bytes(t).size(), *t.nbytes);
    }
}

}  // namespace

TEST(Gguf, ReadsWhatGgufPyWrote) {
    const json e = expected();
    expect_file_matches("basic.gguf", e["basic.gguf"]);
    expect_file_matches("aligned64.gguf", e["aligned64.gguf"]);
}

// sluice's reference dequantisers against gguf.quants.dequantize, bit for bit: both compute each value with the
// same f32 operations in the same order (Q4_K: (d*sc)*q - dmin*m; Q6_K: d*sc*q; Q8_0: d*q; MXFP4 and the float
// types are exact), so there is no rounding difference to allow for.
TEST(Gguf, DequantisesBitExactlyLikeGgufPy) {
    const json e = expected();
    for (const char* file : {"basic.gguf", "aligned64.gguf"}) {
        GgufFile f = GgufFile::open(kDir + "/" + file);
        int checked = 0;
        for (const auto& et : e[file]["tensors"]) {
            const GgufTensorInfo* t = f.tensor(et["name"].get<std::string>());
            ASSERT_NE(t, nullptr);
            if (!ggml_weight_format(t->type) || t->n_dims > 2) continue;
            const Weight w = f.weight(*t);
            EXPECT_EQ(w.cols, int64_t(t->ne[0]));
            EXPECT_EQ(w.rows, int64_t(t->ne[1]));
            std::vector<float> row(size_t(w.cols));
            for (size_t r = 0; r < et["rows"].size(); ++r) {
                ops::ref::dequantize_row(w, int64_t(r), row.data());
                const auto want = et["rows"][r].get<std::vector<double>>();
                ASSERT_EQ(want.size(), row.size());
                int bad = 0;
                for (size_t c = 0; c < row.size(); ++c) {
                    const float wf = float(want[c]);
                    if (std::memcmp(&wf, &row[c], 4) != 0 && bad++ < 3)
                        ADD_FAILURE() << t->name << " [" << r << ", " << c << "]: " << row[c] << " vs gguf-py " << wf;
                }
                EXPECT_EQ(bad, 0) << t->name << " row " << r;
            }
            ++checked;
        }
        EXPECT_EQ(checked, std::string(file) == "basic.gguf" ? 8 : 2) << file;
    }
}

TEST(Gguf, WeightViewsAndTypes) {
    GgufFile f = GgufFile::open(kDir + "/basic.gguf");
    const auto err = [&](const char* name) { return test::error_of([&] { f.weight(*f.tensor(name)); }); };
    EXPECT_NE(err("q5_k.weight").find("tensor 'q5_k.weight': ggml type Q5_K is not supported"), std::string::npos);
    EXPECT_NE(err("cube.weight").find("tensor 'cube.weight': has 3 dims [4, 3, 2, 1]"), std::string::npos);
    EXPECT_EQ(f.weight(*f.tensor("norm.weight")).rows, 1);
    EXPECT_EQ(f.weight(*f.tensor("mxfp4.weight")).format, WeightFormat::MXFP4_GGML);
    EXPECT_EQ(f.weight(*f.tensor("q4_k.weight")).format, WeightFormat::Q4_K);
    EXPECT_EQ(f.tensor("nope"), nullptr);
    // gguf-py's table: spot checks of ids and sizes
    EXPECT_EQ(ggml_type_traits(39)->block_bytes, 17u);
    EXPECT_EQ(ggml_type_traits(14)->block_bytes, 210u);
    EXPECT_EQ(ggml_type_traits(30)->name, "BF16");
    EXPECT_EQ(ggml_type_traits(4), nullptr);  // Q4_2, removed from ggml
    EXPECT_EQ(ggml_type_label(99), "type 99");
}

TEST(Gguf, TypedGettersNameTheKey) {
    GgufFile f = GgufFile::open(kDir + "/basic.gguf");
    EXPECT_EQ(f.get_string("general.architecture"), "llama");
    EXPECT_EQ(f.get_u32("test.u32"), 4294967295u);
    EXPECT_EQ(f.get_uint("test.u64"), UINT64_MAX);
    EXPECT_EQ(f.get_uint("test.u8"), 255u);
    EXPECT_EQ(f.get_int("test.i64"), INT64_MIN);
    EXPECT_EQ(f.get_int("test.i16"), -32768);
    EXPECT_EQ(f.get_float("test.f32"), double(0.1f));
    EXPECT_TRUE(f.get_bool("test.bool_true"));
    EXPECT_EQ(f.get_array("test.arr_string").strings[3], "\xe2\x96\x81the");
    EXPECT_EQ(f.get_array("test.arr_nested").arrays[1].array->at(2).as_i64(), 5);
    const auto err = [](auto fn) { return test::error_of(fn); };
    EXPECT_NE(err([&] { f.get_u32("test.i32"); }).find("basic.gguf: key 'test.i32': is i32, want u32"),
              std::string::npos);
    EXPECT_NE(err([&] { f.get_string("test.u8"); }).find("key 'test.u8': is u8, want string"), std::string::npos);
    EXPECT_NE(err([&] { f.get_uint("test.i8"); }).find("key 'test.i8': -128 is negative"), std::string::npos);
    EXPECT_NE(err([&] { f.get_int("test.u64"); }).find("does not fit in int64"), std::string::npos);
    EXPECT_NE(err([&] { f.get_array("general.name"); }).find("is string, want array"), std::string::npos);
    EXPECT_NE(err([&] { f.get_bool("no.such.key"); }).find("key 'no.such.key' is missing"), std::string::npos);
}

TEST(Gguf, Summaries) {
    GgufFile f = GgufFile::open(kDir + "/basic.gguf");
    EXPECT_EQ(gguf_value_summary(*f.find("test.f32")), "0.1");
    EXPECT_EQ(gguf_value_summary(*f.find("test.i8")), "-128");
    EXPECT_EQ(gguf_value_summary(*f.find("test.arr_string")), "string[4]");
    EXPECT_EQ(gguf_value_summary(*f.find("test.arr_nested")), "array[2]");
    EXPECT_EQ(gguf_value_summary(*f.find("general.architecture")), "\"llama\"");
    EXPECT_EQ(gguf_value_summary(*f.find("general.architecture"), 3), "\"lla...\"");
    EXPECT_EQ(gguf_value_summary(*f.find("test.bool_false")), "false");
}
