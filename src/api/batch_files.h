// Files of a batch job (api/batch_job, api/batch_shard): the input's fingerprint, the default output names, lines
// read one at a time with their byte offsets, durable appends, and compact sets of custom_ids. Everything here
// streams: no file is held in memory whole, so a job of any number of lines runs in memory bounded by its
// in-flight requests plus 16 bytes per custom_id (the key sets below).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <istream>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_set>

namespace sluice::api {

// `digits` random hex digits, for the ids OpenAI's format gives each line and job (batch_req_..., batch_...).
std::string random_hex(int digits);

// xxh3 (64-bit) of a file, as 16 hex digits.
std::string file_xxh3(const std::string& path);

// OUTPUT with `suffix` in place of a trailing .jsonl (or appended): results.jsonl -> results.status.json.
std::string with_suffix(const std::string& path, const std::string& suffix);

// A custom_id as its XXH3 128-bit hash: ids are compared by key, so a set of them costs 16 bytes an id plus the
// set's node, not the ids themselves (two different ids share a key with probability about n^2 / 2^129).
struct IdKey {
    uint64_t lo = 0, hi = 0;
    bool operator==(const IdKey&) const = default;
    auto operator<=>(const IdKey&) const = default;
};
IdKey id_key(const std::string& custom_id);
struct IdKeyHash {
    size_t operator()(const IdKey& k) const { return size_t(k.lo); }
};
using IdSet = std::unordered_set<IdKey, IdKeyHash>;

// Reads a JSONL file a line at a time: the 1-based line number, the byte offset where the line starts and the
// text without its newline (a trailing CR and, on line 1, a UTF-8 byte order mark removed). `terminated` is false
// for a last line without a newline.
class LineReader {
public:
    explicit LineReader(const std::string& path);
    explicit LineReader(std::istream& in) : in_(&in) {}
    LineReader(const LineReader&) = delete;
    LineReader& operator=(const LineReader&) = delete;
    bool next();
    int64_t line_no() const { return line_no_; }
    uint64_t offset() const { return offset_; }
    uint64_t end() const { return end_; }  // the offset after this line and its newline
    bool terminated() const { return terminated_; }
    const std::string& text() const { return text_; }
    bool blank() const { return text_.find_first_not_of(" \t") == std::string::npos; }

private:
    std::ifstream file_;
    std::istream* in_ = &file_;
    int64_t line_no_ = 0;
    uint64_t offset_ = 0, end_ = 0;
    bool terminated_ = false;
    std::string text_;
};

std::string dump_line(const nlohmann::ordered_json& j);

// Appends whole lines and makes them durable: a line is either complete in the file or absent after a crash
// (resume drops an unterminated last line).
class JsonlAppender {
public:
    explicit JsonlAppender(const std::string& path);
    ~JsonlAppender();
    JsonlAppender(const JsonlAppender&) = delete;
    JsonlAppender& operator=(const JsonlAppender&) = delete;
    void write(const nlohmann::ordered_json& j) { write_raw(dump_line(j) + "\n"); }
    void write_raw(const std::string& line);  // with its newline
    void sync();

private:
    std::string path_;
    FILE* f_ = nullptr;
    std::chrono::steady_clock::time_point last_sync_{};
};

// Creates the folders `path` is in (an output of a batch job), naming the path if that fails.
void create_parent_dirs(const std::string& path);

// Writes `text` to `path` through a temporary file and a rename, so readers see the old or the new file whole.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace sluice::api
