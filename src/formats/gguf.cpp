// The GGUF parser: a bounds-checked cursor over the image, then whole-file checks on the tensor infos (alignment,
// data inside the file, no overlaps). No count from the file sizes an allocation before it has been checked
// against the bytes that remain, so a hostile count fails at once instead of allocating.
#include "formats/gguf.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/error.h"

namespace sluice {

namespace {

constexpr uint32_t kMaxDims = 4;
constexpr int kMaxArrayDepth = 8;                            // nested arrays: each level costs a stack frame
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;                  // empty key, value type, one u8
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // empty name, n_dims, one ne, type, offset
constexpr uint64_t kMaxElements = uint64_t(INT64_MAX);       // ggml keeps ne and element counts in int64

uint64_t value_bytes(GgufType t) {  // fixed size of a scalar type; 0 for STRING and ARRAY
    switch (t) {
        case GgufType::UINT8:
        case GgufType::INT8:
        case GgufType::BOOL:
            return 1;
        case GgufType::UINT16:
        case GgufType::INT16:
            return 2;
        case GgufType::UINT32:
        case GgufType::INT32:
        case GgufType::FLOAT32:
            return 4;
        case GgufType::UINT64:
        case GgufType::INT64:
        case GgufType::FLOAT64:
            return 8;
        default:
            return 0;
    }
}

// Smallest encoding of one value of type t (without its type tag): what a count of them must leave room for.
uint64_t min_value_bytes(GgufType t) {
    if (t == GgufType::STRING) return 8;
    if (t == GgufType::ARRAY) return 4 + 8;
    return value_bytes(t);
}

std::string u128_str(unsigned __int128 v) {
    std::string s;
    do {
        s.insert(s.begin(), char('0' + int(v % 10)));
        v /= 10;
    } while (v != 0);
    return s;
}

class Reader {
  public:
    Reader(const uint8_t* data, size_t size, const std::string& what) : data_(data), size_(size), what_(what) {}

    uint64_t pos() const { return pos_; }
    uint64_t left() const { return size_ - pos_; }
    uint64_t size() const { return size_; }
    void seek(uint64_t p) { pos_ = p; }

    template <typename... Args>
    [[noreturn]] void fail_at(uint64_t offset, Args&&... args) const {
        fail(what_, ": offset ", offset, ": ", std::forward<Args>(args)...);
    }

    template <typename T>
    T read(std::string_view field) {
        if (left() < sizeof(T))
            fail_at(pos_, field, ": ", sizeof(T), "-byte field runs past the end of the file (size ", size_, ")");
        T v;
        std::memcpy(&v, data_ + pos_, sizeof(T));  // little-endian hosts only (x86-64, arm64)
        pos_ += sizeof(T);
        return v;
    }

    std::string read_string(std::string_view field) {
        const uint64_t at = pos_;
        const uint64_t n = read<uint64_t>(field);
        if (n > left())
            fail_at(at, field, ": string length ", n, " runs past the end of the file (", left(), " bytes left)");
        std::string s(reinterpret_cast<const char*>(data_ + pos_), size_t(n));
        pos_ += n;
        return s;
    }

    GgufType read_type(std::string_view field) {
        const uint64_t at = pos_;
        const uint32_t t = read<uint32_t>(field);
        if (t > uint32_t(GgufType::FLOAT64)) fail_at(at, field, ": unknown value type ", t);
        return GgufType(t);
    }

    const uint8_t* here() const { return data_ + pos_; }
    void skip(uint64_t n) { pos_ += n; }  // callers have checked n <= left()

  private:
    const uint8_t* data_;
    uint64_t size_;
    uint64_t pos_ = 0;
    const std::string& what_;
};

// Reads a value of type t whose tag has been read. `ctx` names the key for messages.
GgufValue read_value(Reader& r, GgufType t, const std::string& ctx, int depth) {
    if (t == GgufType::STRING) {
        GgufValue v;
        v.type = t;
        v.str = r.read_string(ctx);
        return v;
    }
    if (t != GgufType::ARRAY) {
        const uint64_t at = r.pos();
        const uint64_t n = value_bytes(t);
        if (r.left() < n) r.fail_at(at, ctx, ": ", gguf_type_name(t), " value runs past the end of the file");
        GgufValue v = gguf_scalar(t, r.here());
        if (t == GgufType::BOOL && v.bits > 1) r.fail_at(at, ctx, ": bool value is ", v.bits, " (must be 0 or 1)");
        r.skip(n);
        return v;
    }
    const uint64_t at = r.pos();
    if (depth >= kMaxArrayDepth) r.fail_at(at, ctx, ": arrays nested deeper than ", kMaxArrayDepth);
    auto a = std::make_shared<GgufArray>();
    a->type = r.read_type(ctx + ": array element type");
    a->count = r.read<uint64_t>(ctx + ": array length");
    const uint64_t min_elem = min_value_bytes(a->type);
    if (a->count > r.left() / min_elem)
        r.fail_at(at, ctx, ": array of ", a->count, " ", gguf_type_name(a->type), " needs at least ", min_elem,
                  " bytes each but ", r.left(), " bytes are left in the file");
    if (a->type == GgufType::STRING) {
        a->strings.reserve(a->count);  // count <= left / 8: bounded by the file
        for (uint64_t i = 0; i < a->count; ++i) a->strings.push_back(r.read_string(ctx));
    } else if (a->type == GgufType::ARRAY) {
        a->arrays.reserve(a->count);
        for (uint64_t i = 0; i < a->count; ++i) a->arrays.push_back(read_value(r, GgufType::ARRAY, ctx, depth + 1));
    } else {
        const uint64_t n = a->count * min_elem;  // checked above: fits in what is left
        a->raw.assign(r.here(), r.here() + n);
        if (a->type == GgufType::BOOL)
            for (uint64_t i = 0; i < a->count; ++i)
                if (a->raw[i] > 1)
                    r.fail_at(r.pos() + i, ctx, ": bool element ", i, " is ", int(a->raw[i]), " (must be 0 or 1)");
        r.skip(n);
    }
    GgufValue v;
    v.type = GgufType::ARRAY;
    v.array = std::move(a);
    return v;
}

void read_header_counts(Reader& r, GgufHeader& h, uint64_t& n_tensors, uint64_t& n_kv) {
    if (r.size() < 4) r.fail_at(0, "magic: file is ", r.size(), " bytes, too short for a GGUF header");
    const uint32_t magic = r.read<uint32_t>("magic");
    if (magic != 0x46554747u) r.fail_at(0, "magic: not a GGUF file (first bytes are not \"GGUF\")");
    h.version = r.read<uint32_t>("version");
    if (h.version != 0 && (h.version & 0xFFFFu) == 0)
        r.fail_at(4, "version: big-endian GGUF (version field 0x", std::hex, h.version, std::dec, ") is not supported");
    if (h.version != 2 && h.version != 3)
        r.fail_at(4, "version: GGUF version ", h.version, " is not supported (only 2 and 3)");
    n_tensors = r.read<uint64_t>("tensor count");
    n_kv = r.read<uint64_t>("metadata key/value count");
    if (n_kv > r.left() / kMinKvBytes)
        r.fail_at(16, "metadata key/value count ", n_kv, " cannot fit in the ", r.left(), " bytes left");
    if (n_tensors > r.left() / kMinTensorInfoBytes)
        r.fail_at(8, "tensor count ", n_tensors, " cannot fit in the ", r.left(), " bytes left");
}

void read_metadata(Reader& r, GgufHeader& h, uint64_t n_kv) {
    h.metadata.reserve(n_kv);  // checked against the bytes left
    uint64_t align_at = 0;
    for (uint64_t i = 0; i < n_kv; ++i) {
        const uint64_t at = r.pos();
        std::string key = r.read_string(cat("key #", i));
        const std::string ctx = "key '" + key + "'";
        if (h.key_index.count(key)) r.fail_at(at, ctx, ": duplicate key");
        if (key == "general.alignment") align_at = at;
        const GgufType t = r.read_type(ctx + ": value type");
        GgufValue v = read_value(r, t, ctx, 0);
        h.key_index.emplace(key, h.metadata.size());
        h.metadata.emplace_back(std::move(key), std::move(v));
    }
    auto it = h.key_index.find("general.alignment");
    if (it != h.key_index.end()) {
        const GgufValue& v = h.metadata[it->second].second;
        if (v.type != GgufType::UINT32)
            r.fail_at(align_at, "key 'general.alignment': is ", gguf_type_name(v.type), ", must be u32");
        if (v.bits == 0 || (v.bits & (v.bits - 1)) != 0)
            r.fail_at(align_at, "key 'general.alignment': ", v.bits, " is not a non-zero power of two");
        h.alignment = v.bits;
    }
}

struct InfoPos {
    uint64_t ne0 = 0, offset = 0;  // file offsets of the ne[0] and offset fields
};

GgufTensorInfo read_tensor_info(Reader& r, uint64_t i, InfoPos& pos) {
    GgufTensorInfo t;
    t.info_offset = r.pos();
    t.name = r.read_string(cat("tensor #", i, " name"));
    const std::string ctx = "tensor '" + t.name + "'";
    if (t.name.empty()) r.fail_at(t.info_offset, "tensor #", i, ": empty name");
    const uint64_t dims_at = r.pos();
    t.n_dims = r.read<uint32_t>(ctx + ": n_dims");
    if (t.n_dims < 1 || t.n_dims > kMaxDims) r.fail_at(dims_at, ctx, ": n_dims ", t.n_dims, " (must be 1 to 4)");
    pos.ne0 = r.pos();
    t.numel = 1;
    for (uint32_t d = 0; d < t.n_dims; ++d) {
        const uint64_t at = r.pos();
        const uint64_t ne = r.read<uint64_t>(ctx + ": ne");
        if (ne == 0) r.fail_at(at, ctx, ": ne[", d, "] is 0");
        if (ne > kMaxElements) r.fail_at(at, ctx, ": ne[", d, "] ", ne, " is negative as int64");
        if (t.numel > kMaxElements / ne) r.fail_at(at, ctx, ": element count overflows int64 at ne[", d, "]");
        t.ne[d] = ne;
        t.numel *= ne;
    }
    t.type = r.read<uint32_t>(ctx + ": ggml type");
    pos.offset = r.pos();
    t.offset = r.read<uint64_t>(ctx + ": data offset");
    if (const GgmlTypeTraits* tt = ggml_type_traits(t.type)) {
        if (t.ne[0] % tt->block_elems != 0)
            r.fail_at(pos.ne0, ctx, ": ne[0] ", t.ne[0], " is not a multiple of ", tt->name, "'s block of ",
                      tt->block_elems);
        const uint64_t blocks = t.numel / tt->block_elems;
        if (blocks > UINT64_MAX / tt->block_bytes) r.fail_at(pos.ne0, ctx, ": byte size overflows");
        t.nbytes = blocks * tt->block_bytes;
    }
    return t;
}

// Alignment, bounds and overlaps of the tensors' data, now that the data section's start is known.
void check_tensor_data(const Reader& r, GgufHeader& h, const std::vector<InfoPos>& pos) {
    const uint64_t size = r.size();
    const uint64_t data_bytes = size > h.data_offset ? size - h.data_offset : 0;
    for (size_t i = 0; i < h.tensors.size(); ++i) {
        GgufTensorInfo& t = h.tensors[i];
        const std::string ctx = "tensor '" + t.name + "'";
        if (t.offset % h.alignment != 0)
            r.fail_at(pos[i].offset, ctx, ": data offset ", t.offset, " is not a multiple of the alignment ",
                      h.alignment);
        const uint64_t n = t.nbytes.value_or(1);  // an unknown type still has at least one byte
        if (t.offset > data_bytes || n > data_bytes - t.offset) {
            const unsigned __int128 begin = (unsigned __int128)h.data_offset + t.offset;
            r.fail_at(pos[i].offset, ctx, ": data [", u128_str(begin), ", ", u128_str(begin + n),
                      ") past end of file (size ", size, ")");
        }
        t.file_offset = h.data_offset + t.offset;
    }
    std::vector<size_t> order(h.tensors.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {  // ties in file order: stable messages
        return h.tensors[a].offset != h.tensors[b].offset ? h.tensors[a].offset < h.tensors[b].offset : a < b;
    });
    for (size_t k = 1; k < order.size(); ++k) {
        const GgufTensorInfo& a = h.tensors[order[k - 1]];
        const GgufTensorInfo& b = h.tensors[order[k]];
        const uint64_t a_end = a.file_offset + a.nbytes.value_or(1);
        if (a_end > b.file_offset)
            r.fail_at(pos[order[k]].offset, "tensor '", b.name, "': data [", b.file_offset, ", ",
                      b.file_offset + b.nbytes.value_or(1), ") overlaps tensor '", a.name, "' [", a.file_offset, ", ",
                      a_end, ")");
    }
}

}  // namespace

GgufHeader parse_gguf(const uint8_t* data, size_t size, const std::string& what) {
    Reader r(data, size, what);
    GgufHeader h;
    uint64_t n_tensors = 0, n_kv = 0;
    read_header_counts(r, h, n_tensors, n_kv);
    read_metadata(r, h, n_kv);
    if (n_tensors > r.left() / kMinTensorInfoBytes)
        r.fail_at(8, "tensor count ", n_tensors, " cannot fit in the ", r.left(), " bytes left after the metadata");
    h.tensors.reserve(n_tensors);
    std::vector<InfoPos> pos(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) {
        GgufTensorInfo t = read_tensor_info(r, i, pos[i]);
        if (h.tensor_index.count(t.name)) r.fail_at(t.info_offset, "tensor '", t.name, "': duplicate tensor name");
        h.tensor_index.emplace(t.name, h.tensors.size());
        h.tensors.push_back(std::move(t));
    }
    h.data_offset = (r.pos() + h.alignment - 1) / h.alignment * h.alignment;  // pos < 2^63, alignment < 2^32
    check_tensor_data(r, h, pos);
    return h;
}

}  // namespace sluice
