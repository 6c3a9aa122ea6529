// Fuzzes the packed store's manifest.json parser (alignment, bounds and index checks included). A manifest it
// accepts must survive a round trip: written back as text, it parses again to the same text.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "experts/packed_store.h"
#include "fuzz_parse_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const auto m = sluice::fuzz::parse_or_reject(
        data, size, [](const std::string& t) { return sluice::parse_manifest(t, "fuzz"); });
    if (!m) return 0;
    const std::string text = sluice::manifest_to_text(*m);
    const std::string again = sluice::manifest_to_text(sluice::parse_manifest(text, "round trip"));
    if (again != text) std::abort();
    return 0;
}
