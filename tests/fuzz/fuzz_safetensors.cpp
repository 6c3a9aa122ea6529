// Fuzzes the safetensors header parser: any bytes must give a header or a sluice::Error, never a crash.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        auto h = sluice::parse_safetensors_header(data, size, "fuzz");
        // every accepted tensor must lie inside the input
        for (const auto& t : h.tensors)
            if (h.data_offset + t.end > size) __builtin_trap();
    } catch (const sluice::Error&) {
    }
    return 0;
}
