// The packed expert store written by `sluice pack`: expert-major data files (in one or several folders, one per
// drive) where every expert is one 4 KiB-aligned extent laid out exactly as a streaming slot, plus manifest.json
// describing the source model, every (layer, expert) extent, its parts and its xxh3-64. This file owns the
// manifest (text form, atomic write, opening a store and resolving its files) and binding a store to a model.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "experts/expert_location.h"
#include "ops/weight.h"

namespace sluice {

class Checkpoint;

inline constexpr const char* k_packed_manifest_name = "manifest.json";
inline constexpr int k_packed_format_version = 1;

struct PackedMatrix {
    WeightFormat format = WeightFormat::F32;
    int64_t rows = 0, cols = 0;
};

// Every expert of one layer shares its matrices' formats and shapes.
struct PackedLayer {
    int64_t layer = 0;
    int64_t n_experts = 0;
    std::array<PackedMatrix, 3> matrices;  // gate, up, down
    std::vector<std::string> tensors;      // source tensors holding expert 0's parts (informational)
};

struct PackedExpert {
    int32_t layer = 0, expert = 0;
    uint32_t file = 0;
    uint64_t offset = 0, length = 0;  // 4 KiB-aligned offset in the data file; bytes (the file holds it padded)
    std::vector<std::array<uint64_t, 2>> parts;  // {offset inside the expert (4 KiB-aligned), length}
    uint64_t xxh3 = 0;                           // of the bytes [offset, offset + length)
};

struct PackedFile {
    uint32_t dir = 0;  // index into dirs
    std::string name;
    uint64_t bytes = 0;
};

struct PackedManifest {
    int version = k_packed_format_version;
    std::string source_dir;          // the model folder packed (absolute); spine tensors stay there
    uint64_t config_xxh3 = 0;        // of its config.json bytes
    uint64_t tensor_names_xxh3 = 0;  // of its sorted tensor names joined by '\n'
    uint64_t n_tensors = 0;
    std::vector<std::string> dirs;  // data folders (absolute, as written)
    std::vector<PackedFile> files;
    std::vector<PackedLayer> layers;
    std::vector<PackedExpert> experts;  // layer-major, expert-minor
};

std::string manifest_to_text(const PackedManifest& m);
// Parses and checks the manifest's own consistency (alignment, bounds, indices); `what` names it in errors.
PackedManifest parse_manifest(const std::string& text, const std::string& what);
// Writes dir/manifest.json atomically (temporary name, fsync, rename, fsync of the folder).
void write_manifest_atomic(const std::string& dir, const PackedManifest& m);

// A store opened for reading: the manifest and the resolved path of every data file (same order as files).
struct PackedStore {
    PackedManifest manifest;
    std::string manifest_path;
    std::vector<std::string> paths;
};
// dirs: the manifest's folder and, optionally, the folders its data files are in now (searched first; the
// folders recorded in the manifest are the fallback). Throws Error for a missing manifest, a missing or
// truncated data file.
PackedStore open_packed_store(const std::vector<std::string>& dirs);

// Identity of a model folder as recorded in a manifest.
uint64_t config_xxh3_of(const std::string& model_dir);
uint64_t tensor_names_xxh3_of(const Checkpoint& ck);

// The store's locations for the model's experts (views as bound by the architecture). Throws one Error naming
// the manifest and the field when the store does not belong to this model or disagrees with its weights.
ExpertLayout bind_packed_store(const PackedStore& store, const Checkpoint& ck,
                               const std::vector<std::vector<ExpertWeights>>& views);

// "a,b,c" -> {"a", "b", "c"} (empty items dropped).
std::vector<std::string> split_dir_list(const std::string& text);

}  // namespace sluice
