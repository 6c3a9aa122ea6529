// Bad GGUF inputs, made by mutating the gguf-py fixtures' bytes: each must be one sluice::Error naming the file,
// the byte offset of the offending field and the key or tensor, never a crash or an out-of-bounds read.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "formats/gguf.h"
#include "../support/test_util.h"

using namespace sluice;

namespace {

const std::string kDir = std::string(SLUICE_TEST_DATA_DIR) + "/gguf";

std::string slurp(const std::string& name) {
    std::ifstream f(kDir + "/" + name, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

std::string parse_error(const std::string& b) {
    return test::error_of([&] { parse_gguf(reinterpret_cast<const uint8_t*>(b.data()), b.size(), "f.gguf"); });
}

template <typename T>
void put(std::string& b, size_t pos, T v) {
    ASSERT_LE(pos + sizeof(T), b.size());
    std::memcpy(b.data() + pos, &v, sizeof(T));
}

// Where fields of the fixture live, found through the length-prefixed names (the layout is GGUF's, the numbers
// are whatever gguf-py wrote).
struct Layout {
    std::string b;
    size_t find_name(const std::string& s) const {
        std::string pat(8, '\0');
        const uint64_t n = s.size();
        std::memcpy(pat.data(), &n, 8);
        pat += s;
        const size_t p = b.find(pat);
        EXPECT_NE(p, std::string::npos) << s;
        EXPECT_EQ(b.find(pat, p + 1), std::string::npos) << s << " is not unique";
        return p;
    }
    size_t key(const std::string& k) const { return find_name(k); }             // the key's length field
    size_t vtype(const std::string& k) const { return key(k) + 8 + k.size(); }  // the value type tag
    size_t value(const std::string& k) const { return vtype(k) + 4; }           // the value (arrays: element type)
    size_t tensor(const std::string& t) const { return find_name(t); }
    size_t n_dims(const std::string& t) const { return tensor(t) + 8 + t.size(); }
    size_t ne(const std::string& t, int d) const { return n_dims(t) + 4 + 8 * size_t(d); }
    size_t type(const std::string& t) const {
        uint32_t n;
        std::memcpy(&n, b.data() + n_dims(t), 4);
        return ne(t, int(n));
    }
    size_t offset(const std::string& t) const { return type(t) + 4; }
};

struct Case {
    std::string what, bytes, expect;
    size_t at;  // the byte offset the message must name
};

}  // namespace

TEST(GgufErrors, EveryTruncationIsAnError) {
    const std::string b = slurp("basic.gguf");
    ASSERT_EQ(parse_error(b), "");
    // The last tensor ends at the file's end less its padding; any cut before that loses something.
    GgufHeader h = parse_gguf(reinterpret_cast<const uint8_t*>(b.data()), b.size(), "f.gguf");
    uint64_t end = 0;
    for (const auto& t : h.tensors) end = std::max(end, t.file_offset + *t.nbytes);
    for (size_t n = 0; n < end; ++n) {
        const std::string err = parse_error(b.substr(0, n));
        ASSERT_EQ(err.rfind("f.gguf: offset ", 0), 0u) << "cut at " << n << ": '" << err << "'";
    }
    EXPECT_NE(parse_error("").find("offset 0: magic: file is 0 bytes"), std::string::npos);
    EXPECT_NE(parse_error(b.substr(0, 20)).find("offset 16: metadata key/value count: 8-byte field runs past"),
              std::string::npos);
    const std::string cut = parse_error(b.substr(0, end - 1));
    EXPECT_NE(cut.find("tensor 'cube.weight': data ["), std::string::npos) << cut;
    EXPECT_NE(cut.find(") past end of file (size " + std::to_string(end - 1) + ")"), std::string::npos) << cut;
}

TEST(GgufErrors, MutatedFixtures) {
    const Layout L{slurp("basic.gguf")};
    const Layout A{slurp("aligned64.gguf")};
    const auto with = [](const Layout& l, auto mutate) {
        std::string b = l.b;
        mutate(b);
        return b;
    };
    std::vector<Case> cases = {
        {"bad magic", with(L, [](auto& b) { b[3] = 'X'; }), "magic: not a GGUF file", 0},
        {"version 1", with(L, [](auto& b) { put<uint32_t>(b, 4, 1); }), "version: GGUF version 1 is not supported", 4},
        {"version 4", with(L, [](auto& b) { put<uint32_t>(b, 4, 4); }), "GGUF version 4 is not supported", 4},
        {"big-endian", with(L, [](auto& b) { put<uint32_t>(b, 4, 0x03000000u); }), "big-endian GGUF", 4},
        {"huge key count", with(L, [](auto& b) { put<uint64_t>(b, 16, uint64_t(1) << 62); }),
         "metadata key/value count 4611686018427387904 cannot fit", 16},
        {"huge tensor count", with(L, [](auto& b) { put<uint64_t>(b, 8, UINT64_MAX); }),
         "tensor count 18446744073709551615 cannot fit", 8},
        {"key length past EOF", with(L, [](auto& b) { put<uint64_t>(b, 24, 1u << 30); }),
         "key #0: string length 1073741824 runs past the end of the file", 24},
        {"string length past EOF", with(L, [&](auto& b) { put<uint64_t>(b, L.value("general.name"), 5000); }),
         "key 'general.name': string length 5000 runs past", L.value("general.name")},
        {"bad value type", with(L, [&](auto& b) { put<uint32_t>(b, L.vtype("test.u8"), 13); }),
         "key 'test.u8': value type: unknown value type 13", L.vtype("test.u8")},
        {"bad array element type", with(L, [&](auto& b) { put<uint32_t>(b, L.value("test.arr_i32"), 77); }),
         "key 'test.arr_i32': array element type: unknown value type 77", L.value("test.arr_i32")},
        {"huge array", with(L, [&](auto& b) { put<uint64_t>(b, L.value("test.arr_i32") + 4, uint64_t(1) << 40); }),
         "key 'test.arr_i32': array of 1099511627776 i32 needs at least 4 bytes each", L.value("test.arr_i32")},
        {"huge string array", with(L, [&](auto& b) { put<uint64_t>(b, L.value("test.arr_string") + 4, UINT64_MAX); }),
         "key 'test.arr_string': array of 18446744073709551615 string", L.value("test.arr_string")},
        {"array string past EOF", with(L, [&](auto& b) { put<uint64_t>(b, L.value("test.arr_string") + 12, 1e6); }),
         "key 'test.arr_string': string length 1000000 runs past", L.value("test.arr_string") + 12},
        {"bool 2", with(L, [&](auto& b) { b[L.value("test.bool_true")] = 2; }),
         "key 'test.bool_true': bool value is 2 (must be 0 or 1)", L.value("test.bool_true")},
        {"bool element 2", with(L, [&](auto& b) { b[L.value("test.arr_bool") + 12 + 1] = 2; }),
         "key 'test.arr_bool': bool element 1 is 2", L.value("test.arr_bool") + 13},
        {"duplicate key", with(L, [&](auto& b) { b[L.key("test.i8") + 8 + 5] = 'u'; }), "key 'test.u8': duplicate key",
         L.key("test.i8")},
        {"alignment 0", with(A, [&](auto& b) { put<uint32_t>(b, A.value("general.alignment"), 0); }),
         "key 'general.alignment': 0 is not a non-zero power of two", A.key("general.alignment")},
        {"alignment 3", with(A, [&](auto& b) { put<uint32_t>(b, A.value("general.alignment"), 3); }),
         "key 'general.alignment': 3 is not a non-zero power of two", A.key("general.alignment")},
        {"alignment i32", with(A, [&](auto& b) { put<uint32_t>(b, A.vtype("general.alignment"), 5); }),
         "key 'general.alignment': is i32, must be u32", A.key("general.alignment")},
        {"tensor name past EOF", with(L, [&](auto& b) { put<uint64_t>(b, L.tensor("f32.weight"), 1e9); }),
         "tensor #0 name: string length 1000000000 runs past", L.tensor("f32.weight")},
        {"n_dims 0", with(L, [&](auto& b) { put<uint32_t>(b, L.n_dims("q8_0.weight"), 0); }),
         "tensor 'q8_0.weight': n_dims 0 (must be 1 to 4)", L.n_dims("q8_0.weight")},
        {"n_dims 5", with(L, [&](auto& b) { put<uint32_t>(b, L.n_dims("q8_0.weight"), 5); }),
         "tensor 'q8_0.weight': n_dims 5 (must be 1 to 4)", L.n_dims("q8_0.weight")},
        {"ne 0", with(L, [&](auto& b) { put<uint64_t>(b, L.ne("f16.weight", 1), 0); }),
         "tensor 'f16.weight': ne[1] is 0", L.ne("f16.weight", 1)},
        {"ne negative", with(L, [&](auto& b) { put<uint64_t>(b, L.ne("f16.weight", 0), uint64_t(1) << 63); }),
         "tensor 'f16.weight': ne[0] 9223372036854775808 is negative as int64", L.ne("f16.weight", 0)},
        {"ne product overflows", with(L, [&](auto& b) { put<uint64_t>(b, L.ne("f16.weight", 1), uint64_t(1) << 60); }),
         "tensor 'f16.weight': element count overflows int64 at ne[1]", L.ne("f16.weight", 1)},
        {"ne past EOF", with(L, [&](auto& b) { put<uint64_t>(b, L.ne("f16.weight", 1), 1u << 20); }),
         "tensor 'f16.weight': data [1696, 33556128) past end of file (size 4384)", L.offset("f16.weight")},
        {"ne[0] not whole blocks", with(L, [&](auto& b) { put<uint64_t>(b, L.ne("q8_0.weight", 0), 48); }),
         "tensor 'q8_0.weight': ne[0] 48 is not a multiple of Q8_0's block of 32", L.ne("q8_0.weight", 0)},
        {"unaligned offset", with(L, [&](auto& b) { put<uint64_t>(b, L.offset("q8_0.weight"), 353); }),
         "tensor 'q8_0.weight': data offset 353 is not a multiple of the alignment 32", L.offset("q8_0.weight")},
        {"data past EOF", with(L, [&](auto& b) { put<uint64_t>(b, L.offset("cube.weight"), 4096); }),
         "tensor 'cube.weight': data [5664, 5760) past end of file (size 4384)", L.offset("cube.weight")},
        {"huge offset", with(L, [&](auto& b) { put<uint64_t>(b, L.offset("cube.weight"), UINT64_MAX - 31); }),
         "tensor 'cube.weight': data [18446744073709553152, 18446744073709553248) past end", L.offset("cube.weight")},
        {"overlap", with(L, [&](auto& b) { put<uint64_t>(b, L.offset("f16.weight"), 64); }),
         "tensor 'f16.weight': data [1632, 1728) overlaps tensor 'f32.weight' [1568, 1696)", L.offset("f16.weight")},
        {"duplicate tensor",  // f16.weight renamed f32.weight
         with(L, [&](auto& b) { std::memcpy(b.data() + L.tensor("f16.weight") + 8, "f32", 3); }),
         "tensor 'f32.weight': duplicate tensor name", L.tensor("f16.weight")},
        {"aligned64: unaligned offset", with(A, [&](auto& b) { put<uint64_t>(b, A.offset("b.weight"), 32); }),
         "tensor 'b.weight': data offset 32 is not a multiple of the alignment 64", A.offset("b.weight")},
    };
    for (const auto& c : cases) {
        const std::string err = parse_error(c.bytes);
        const std::string at = "f.gguf: offset " + std::to_string(c.at) + ": ";
        EXPECT_EQ(err.rfind(at, 0), 0u) << c.what << ": want '" << at << "' at the start of: " << err;
        EXPECT_NE(err.find(c.expect), std::string::npos) << c.what << ": want '" << c.expect << "' in: " << err;
    }
    EXPECT_GE(cases.size(), 30u);
}

TEST(GgufErrors, VersionTwoIsAccepted) {
    std::string b = slurp("basic.gguf");
    put<uint32_t>(b, 4, 2);
    EXPECT_EQ(parse_gguf(reinterpret_cast<const uint8_t*>(b.data()), b.size(), "f.gguf").version, 2u);
}

// An unknown ggml type id is no error until the tensor's size is needed; then the error names id and tensor.
TEST(GgufErrors, UnknownGgmlTypeWhenSizeIsNeeded) {
    const Layout L{slurp("basic.gguf")};
    std::string b = L.b;
    put<uint32_t>(b, L.type("q5_k.weight"), 99);
    const std::string path = ::testing::TempDir() + "/unknown_type.gguf";
    std::ofstream(path, std::ios::binary) << b;
    GgufFile f = GgufFile::open(path);
    const GgufTensorInfo& t = *f.tensor("q5_k.weight");
    EXPECT_FALSE(t.nbytes.has_value());
    const auto err = [](auto fn) { return test::error_of(fn); };
    EXPECT_NE(
        err([&] {
            f.tensor_bytes(t);
        }).find("offset " + std::to_string(L.tensor("q5_k.weight")) + ": tensor 'q5_k.weight': unknown ggml type 99"),
        std::string::npos);
    EXPECT_NE(err([&] { f.weight(t); }).find("tensor 'q5_k.weight': ggml type type 99 is not supported"),
              std::string::npos);
    EXPECT_EQ(f.tensor_bytes(*f.tensor("norm.weight")).size(), 64u);  // the others are still usable
    // ... but it still may not overlap the next tensor
    put<uint64_t>(b, L.offset("norm.weight"), 2304);  // q5_k's offset
    EXPECT_NE(parse_error(b).find("tensor 'norm.weight': data [3872, 3936) overlaps tensor 'q5_k.weight'"),
              std::string::npos)
        << parse_error(b);
    std::remove(path.c_str());
}

TEST(GgufErrors, DeepNestingAndOpeningMissingFiles) {
    // header + one key "k" holding arrays nested 9 deep (each: element type ARRAY, count 1)
    std::string b("GGUF", 4);
    const auto u32 = [&](uint32_t v) { b.append(reinterpret_cast<const char*>(&v), 4); };
    const auto u64 = [&](uint64_t v) { b.append(reinterpret_cast<const char*>(&v), 8); };
    u32(3), u64(0), u64(1), u64(1), b += "k", u32(9);
    for (int i = 0; i < 9; ++i) u32(9), u64(1);
    u32(0), u64(0);
    b += std::string(64, '\0');
    EXPECT_NE(parse_error(b).find("offset 133: key 'k': arrays nested deeper than 8"), std::string::npos)
        << parse_error(b);
    try {
        GgufFile::open(kDir + "/no_such.gguf");
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("no_such.gguf"), std::string::npos) << e.what();
    }
}
