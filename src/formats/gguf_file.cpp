// GGUF around the parser: the ggml type table, value helpers and printable summaries, and GgufFile (memory map,
// typed getters, tensor bytes and Weight views).
#include <charconv>
#include <cstring>
#include <iterator>

#include "core/enum_names.h"
#include "core/error.h"
#include "formats/gguf.h"

namespace sluice {

namespace {

// gguf-py 0.19.0 gguf.constants: GGMLQuantizationType ids and GGML_QUANT_SIZES (elements, bytes per block).
// Ids 4, 5 and 31-33, 36-38 were removed from ggml and are unknown here too.
constexpr GgmlTypeTraits kGgmlTypes[] = {
    {0, "F32", 1, 4},         {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},      {3, "Q4_1", 32, 20},
    {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},      {8, "Q8_0", 32, 34},      {9, "Q8_1", 32, 40},
    {10, "Q2_K", 256, 84},    {11, "Q3_K", 256, 110},   {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},   {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66}, {17, "IQ2_XS", 256, 74},
    {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},   {20, "IQ4_NL", 32, 18},   {21, "IQ3_S", 256, 110},
    {22, "IQ2_S", 256, 82},   {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},         {25, "I16", 1, 2},
    {26, "I32", 1, 4},        {27, "I64", 1, 8},        {28, "F64", 1, 8},        {29, "IQ1_M", 256, 56},
    {30, "BF16", 1, 2},       {34, "TQ1_0", 256, 54},   {35, "TQ2_0", 256, 66},   {39, "MXFP4", 32, 17},
    {40, "NVFP4", 64, 36},    {41, "Q1_0", 128, 18},
};

template <typename T>
std::string shortest(T v) {  // shortest text that reads back as the same value
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, res.ptr);
}

std::string quoted(const std::string& s, size_t max_chars) {
    std::string out = "\"";
    for (size_t i = 0; i < s.size(); ++i) {
        if (i == max_chars) {
            out += "...";
            break;
        }
        const unsigned char c = s[i];
        if (c == '"' || c == '\\') {
            out += '\\';
            out += char(c);
        } else if (c < 0x20 || c == 0x7F) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
        } else {
            out += char(c);
        }
    }
    return out + "\"";
}

}  // namespace

std::string_view gguf_type_name(GgufType t) {
    // in GgufType's order (its values 0..12)
    static constexpr const char* kNames[] = {"u8",  "i8",   "u16",    "i16",   "u32", "i32", "f32",
                                             "bool", "string", "array", "u64", "i64", "f64"};
    static_assert(std::size(kNames) == size_t(GgufType::FLOAT64) + 1, "a name for every GgufType");
    return enum_name(kNames, t);
}

bool GgufValue::is_integer() const {
    switch (type) {
        case GgufType::UINT8:
        case GgufType::INT8:
        case GgufType::UINT16:
        case GgufType::INT16:
        case GgufType::UINT32:
        case GgufType::INT32:
        case GgufType::UINT64:
        case GgufType::INT64:
            return true;
        default:
            return false;
    }
}

double GgufValue::as_f64() const {
    if (is_float()) {
        double d;
        std::memcpy(&d, &bits, 8);
        return d;
    }
    const bool is_signed =
        type == GgufType::INT8 || type == GgufType::INT16 || type == GgufType::INT32 || type == GgufType::INT64;
    return is_signed ? double(as_i64()) : double(bits);
}

GgufValue gguf_scalar(GgufType t, const uint8_t* p) {
    GgufValue v;
    v.type = t;
    const auto load = [p](auto x) {
        std::memcpy(&x, p, sizeof x);
        return x;
    };
    switch (t) {
        case GgufType::UINT8:
        case GgufType::BOOL:
            v.bits = p[0];
            break;
        case GgufType::INT8:
            v.bits = uint64_t(int64_t(int8_t(p[0])));
            break;
        case GgufType::UINT16:
            v.bits = load(uint16_t());
            break;
        case GgufType::INT16:
            v.bits = uint64_t(int64_t(load(int16_t())));
            break;
        case GgufType::UINT32:
            v.bits = load(uint32_t());
            break;
        case GgufType::INT32:
            v.bits = uint64_t(int64_t(load(int32_t())));
            break;
        case GgufType::FLOAT32: {
            const double d = load(float());
            std::memcpy(&v.bits, &d, 8);
            break;
        }
        case GgufType::UINT64:
        case GgufType::INT64:
        case GgufType::FLOAT64:
            v.bits = load(uint64_t());
            break;
        default:
            SLUICE_ASSERT(false, "gguf_scalar: ", gguf_type_name(t), " is not a scalar type");
    }
    return v;
}

GgufValue GgufArray::at(uint64_t i) const {
    SLUICE_ASSERT(i < count, "GgufArray::at(", i, ") of ", count);
    if (type == GgufType::STRING) {
        GgufValue v;
        v.type = GgufType::STRING;
        v.str = strings[i];
        return v;
    }
    if (type == GgufType::ARRAY) return arrays[i];
    return gguf_scalar(type, raw.data() + i * (raw.size() / count));
}

const GgmlTypeTraits* ggml_type_traits(uint32_t id) {
    for (const auto& t : kGgmlTypes)
        if (t.id == id) return &t;
    return nullptr;
}

std::string ggml_type_label(uint32_t id) {
    const GgmlTypeTraits* t = ggml_type_traits(id);
    return t ? std::string(t->name) : cat("type ", id);
}

std::optional<WeightFormat> ggml_weight_format(uint32_t id) {
    switch (id) {
        case 0:
            return WeightFormat::F32;
        case 1:
            return WeightFormat::F16;
        case 8:
            return WeightFormat::Q8_0;
        case 12:
            return WeightFormat::Q4_K;
        case 14:
            return WeightFormat::Q6_K;
        case 30:
            return WeightFormat::BF16;
        case 39:
            return WeightFormat::MXFP4_GGML;
        default:
            return std::nullopt;
    }
}

std::string gguf_value_summary(const GgufValue& v, size_t max_chars) {
    switch (v.type) {
        case GgufType::STRING:
            return quoted(v.str, max_chars);
        case GgufType::ARRAY:
            return cat(gguf_type_name(v.array->type), "[", v.array->count, "]");
        case GgufType::BOOL:
            return v.bits ? "true" : "false";
        case GgufType::FLOAT32:
            return shortest(float(v.as_f64()));
        case GgufType::FLOAT64:
            return shortest(v.as_f64());
        case GgufType::INT8:
        case GgufType::INT16:
        case GgufType::INT32:
        case GgufType::INT64:
            return std::to_string(v.as_i64());
        default:
            return std::to_string(v.bits);
    }
}

GgufFile GgufFile::open(const std::string& path) {
    GgufFile f;
    f.file_ = std::make_unique<MappedFile>(path);
    f.header_ = parse_gguf(f.file_->data(), f.file_->size_bytes(), path);
    return f;
}

const GgufValue* GgufFile::find(std::string_view key) const {
    auto it = header_.key_index.find(key);
    return it == header_.key_index.end() ? nullptr : &header_.metadata[it->second].second;
}

const GgufValue& GgufFile::get(std::string_view key, std::string_view want) const {
    const GgufValue* v = find(key);
    if (!v) fail(path(), ": key '", key, "' is missing (want ", want, ")");
    return *v;
}

uint32_t GgufFile::get_u32(std::string_view key) const {
    const GgufValue& v = get(key, "u32");
    if (v.type != GgufType::UINT32) fail(path(), ": key '", key, "': is ", gguf_type_name(v.type), ", want u32");
    return uint32_t(v.bits);
}

uint64_t GgufFile::get_uint(std::string_view key) const {
    const GgufValue& v = get(key, "an unsigned integer");
    if (!v.is_integer()) fail(path(), ": key '", key, "': is ", gguf_type_name(v.type), ", want an integer");
    if (v.type != GgufType::UINT64 && v.as_i64() < 0) fail(path(), ": key '", key, "': ", v.as_i64(), " is negative");
    return v.bits;
}

int64_t GgufFile::get_int(std::string_view key) const {
    const GgufValue& v = get(key, "an integer");
    if (!v.is_integer()) fail(path(), ": key '", key, "': is ", gguf_type_name(v.type), ", want an integer");
    if (v.type == GgufType::UINT64 && v.bits > uint64_t(INT64_MAX))
        fail(path(), ": key '", key, "': ", v.bits, " does not fit in int64");
    return v.as_i64();
}

double GgufFile::get_float(std::string_view key) const {
    const GgufValue& v = get(key, "a float");
    if (!v.is_float()) fail(path(), ": key '", key, "': is ", gguf_type_name(v.type), ", want f32 or f64");
    return v.as_f64();
}

bool GgufFile::get_bool(std::string_view key) const {
    const GgufValue& v = get(key, "bool");
    if (v.type != GgufType::BOOL) fail(path(), ": key '", key, "': is ", gguf_type_name(v.type), ", want bool");
    return v.bits != 0;
}

const std::string& GgufFile::get_string(std::string_view key) const {
    const GgufValue& v = get(key, "string");
    if (v.type != GgufType::STRING) fail(path(), ": key '", key, "': is ", gguf_type_name(v.type), ", want string");
    return v.str;
}

const GgufArray& GgufFile::get_array(std::string_view key) const {
    const GgufValue& v = get(key, "array");
    if (v.type != GgufType::ARRAY) fail(path(), ": key '", key, "': is ", gguf_type_name(v.type), ", want array");
    return *v.array;
}

const GgufTensorInfo* GgufFile::tensor(std::string_view name) const {
    auto it = header_.tensor_index.find(name);
    return it == header_.tensor_index.end() ? nullptr : &header_.tensors[it->second];
}

std::span<const uint8_t> GgufFile::tensor_bytes(const GgufTensorInfo& t) const {
    if (!t.nbytes)
        fail(path(), ": offset ", t.info_offset, ": tensor '", t.name, "': unknown ggml type ", t.type,
             " (its size is unknown)");
    return {file_->data() + t.file_offset, size_t(*t.nbytes)};
}

Weight GgufFile::weight(const GgufTensorInfo& t) const {
    const auto format = ggml_weight_format(t.type);
    if (!format)
        fail(path(), ": tensor '", t.name, "': ggml type ", ggml_type_label(t.type),
             " is not supported by sluice's kernels (F32, F16, BF16, Q8_0, Q4_K, Q6_K, MXFP4 are)");
    if (t.ne[2] != 1 || t.ne[3] != 1)
        fail(path(), ": tensor '", t.name, "': has ", t.n_dims, " dims [", t.ne[0], ", ", t.ne[1], ", ", t.ne[2], ", ",
             t.ne[3], "] (ggml order), a weight view needs at most 2");
    Weight w;
    w.format = *format;
    w.rows = int64_t(t.ne[1]);
    w.cols = int64_t(t.ne[0]);
    w.data = tensor_bytes(t).data();
    w.check();
    return w;
}

}  // namespace sluice
