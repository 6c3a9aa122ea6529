// GGUF (llama.cpp's single-file format), versions 2 and 3, little-endian: "GGUF", u32 version, u64 tensor count,
// u64 key/value count, the key/values, the tensor infos, padding to general.alignment (default 32), then the data
// section. Every count, length, type, shape and offset is validated against the bytes of the file before anything
// is handed out; errors name the file, the byte offset and the key or tensor. parse_gguf is pure (the fuzzer drives
// it); GgufFile maps a file and parses it. Tensor shapes are in ggml order: ne[0] is the contiguous dimension.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/mapped_file.h"
#include "ops/weight.h"

namespace sluice {

enum class GgufType : uint32_t {
    UINT8 = 0,
    INT8 = 1,
    UINT16 = 2,
    INT16 = 3,
    UINT32 = 4,
    INT32 = 5,
    FLOAT32 = 6,
    BOOL = 7,
    STRING = 8,
    ARRAY = 9,
    UINT64 = 10,
    INT64 = 11,
    FLOAT64 = 12,
};

std::string_view gguf_type_name(GgufType t);  // "u8", "i32", "f32", "bool", "string", "array", ...

struct GgufArray;

// One metadata value. Scalars keep their exact value: unsigned types zero-extended into `bits`, signed types
// sign-extended, FLOAT32/FLOAT64 as the bits of the double they convert to exactly, BOOL as 0 or 1.
struct GgufValue {
    GgufType type = GgufType::UINT8;
    uint64_t bits = 0;
    std::string str;                         // STRING
    std::shared_ptr<const GgufArray> array;  // ARRAY

    bool is_integer() const;  // u8..i64 (not bool)
    bool is_float() const { return type == GgufType::FLOAT32 || type == GgufType::FLOAT64; }
    uint64_t as_u64() const { return bits; }          // meaningful for unsigned types and bool
    int64_t as_i64() const { return int64_t(bits); }  // meaningful for signed types
    double as_f64() const;                            // float types; integers and bool converted
};

// Decodes one little-endian scalar of type t (not STRING or ARRAY) from p.
GgufValue gguf_scalar(GgufType t, const uint8_t* p);

struct GgufArray {
    GgufType type = GgufType::UINT8;  // element type
    uint64_t count = 0;
    std::vector<uint8_t> raw;          // numeric and bool elements, packed little-endian as in the file
    std::vector<std::string> strings;  // STRING elements
    std::vector<GgufValue> arrays;     // ARRAY elements (each value's `array` is set)

    GgufValue at(uint64_t i) const;  // element i as a value (asserts i < count)
};

// ggml tensor types: ids, block sizes and bytes per block as gguf-py's GGML_QUANT_SIZES lists them.
struct GgmlTypeTraits {
    uint32_t id;
    std::string_view name;  // "F32", "Q4_K", "MXFP4", ...
    uint32_t block_elems;
    uint32_t block_bytes;
};
const GgmlTypeTraits* ggml_type_traits(uint32_t id);  // null for an id gguf-py does not know
std::string ggml_type_label(uint32_t id);             // the name, or "type <id>"
// The weight format sluice's kernels run for this ggml type, if any (F32, F16, BF16, Q8_0, Q4_K, Q6_K, MXFP4).
std::optional<WeightFormat> ggml_weight_format(uint32_t id);

struct GgufTensorInfo {
    std::string name;
    uint32_t n_dims = 0;
    std::array<uint64_t, 4> ne{1, 1, 1, 1};  // ggml order, unused dims 1
    uint32_t type = 0;                       // ggml type id (may be unknown: see nbytes)
    uint64_t offset = 0;                     // relative to the data section, as stored
    uint64_t file_offset = 0;                // data_offset + offset
    uint64_t info_offset = 0;                // where this tensor's info starts in the file (for messages)
    uint64_t numel = 0;
    std::optional<uint64_t> nbytes;  // empty when the type id is unknown
};

struct GgufHeader {
    uint32_t version = 0;
    uint64_t alignment = 32;
    uint64_t data_offset = 0;                                 // file offset of the data section (aligned)
    std::vector<std::pair<std::string, GgufValue>> metadata;  // in file order
    std::map<std::string, size_t, std::less<>> key_index;
    std::vector<GgufTensorInfo> tensors;  // in file order
    std::map<std::string, size_t, std::less<>> tensor_index;
};

// Parses and validates a whole GGUF image of `size` bytes; `what` names it in errors. Throws Error.
GgufHeader parse_gguf(const uint8_t* data, size_t size, const std::string& what);

// A short printable form: scalars as text, strings quoted and cut at max_chars, arrays as "u32[5]".
std::string gguf_value_summary(const GgufValue& v, size_t max_chars = 60);

class GgufFile {
  public:
    static GgufFile open(const std::string& path);  // maps and parses; throws Error naming the path

    const std::string& path() const { return file_->path(); }
    uint64_t size_bytes() const { return file_->size_bytes(); }
    const GgufHeader& header() const { return header_; }
    uint32_t version() const { return header_.version; }
    uint64_t alignment() const { return header_.alignment; }
    uint64_t data_offset() const { return header_.data_offset; }
    const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return header_.metadata; }

    const GgufValue* find(std::string_view key) const;  // null when absent
    // Typed getters: throw Error naming the file and key when it is absent or of another type.
    uint32_t get_u32(std::string_view key) const;   // exactly UINT32
    uint64_t get_uint(std::string_view key) const;  // any integer type, value >= 0
    int64_t get_int(std::string_view key) const;    // any integer type that fits int64
    double get_float(std::string_view key) const;   // FLOAT32 or FLOAT64
    bool get_bool(std::string_view key) const;
    const std::string& get_string(std::string_view key) const;
    const GgufArray& get_array(std::string_view key) const;

    const std::vector<GgufTensorInfo>& tensors() const { return header_.tensors; }
    const GgufTensorInfo* tensor(std::string_view name) const;  // null when absent
    // The tensor's bytes inside the map; throws Error naming the tensor when its ggml type is unknown.
    std::span<const uint8_t> tensor_bytes(const GgufTensorInfo& t) const;
    // A Weight view of a tensor with at most 2 dims (rows = ne[1], cols = ne[0]); throws Error for a type sluice's
    // kernels do not run or a tensor with more dims.
    Weight weight(const GgufTensorInfo& t) const;

  private:
    GgufFile() = default;
    const GgufValue& get(std::string_view key, std::string_view want) const;

    std::unique_ptr<MappedFile> file_;
    GgufHeader header_;
};

}  // namespace sluice
