// Fuzzes the GGUF parser: any bytes must give a header or a sluice::Error, never a crash. Every accepted tensor
// must lie inside the input, aligned and without overlaps, and every value must be readable through the helpers.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "formats/gguf.h"

namespace {
void touch(const sluice::GgufValue& v) {
    (void)sluice::gguf_value_summary(v);
    if (v.type != sluice::GgufType::ARRAY) return;
    const sluice::GgufArray& a = *v.array;
    for (uint64_t i = 0; i < std::min<uint64_t>(a.count, 64); ++i) touch(a.at(i));
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        auto h = sluice::parse_gguf(data, size, "fuzz");
        for (const auto& [key, v] : h.metadata) touch(v);
        for (const auto& t : h.tensors) {
            if (t.offset % h.alignment != 0 || t.file_offset != h.data_offset + t.offset) __builtin_trap();
            const uint64_t n = t.nbytes.value_or(1);
            if (t.file_offset > size || n > size - t.file_offset) __builtin_trap();
            if (t.nbytes) {  // the bytes are readable (ASan checks the range)
                volatile uint8_t x = data[t.file_offset] ^ data[t.file_offset + n - 1];
                (void)x;
                if (auto f = sluice::ggml_weight_format(t.type); f && t.ne[2] == 1 && t.ne[3] == 1) {
                    sluice::Weight w{*f, int64_t(t.ne[1]), int64_t(t.ne[0]), data + t.file_offset, nullptr};
                    w.check();
                    if (w.data_bytes() != n) __builtin_trap();
                }
            }
        }
    } catch (const sluice::Error&) {
    }
    return 0;
}
