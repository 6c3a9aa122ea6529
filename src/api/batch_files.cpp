#include "api/batch_files.h"

#include <unistd.h>
#include <xxhash.h>

#include <filesystem>
#include <random>
#include <vector>

#include "core/error.h"

namespace sluice::api {

namespace fs = std::filesystem;

std::string random_hex(int digits) {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    static const char* hex = "0123456789abcdef";
    std::string s;
    for (int i = 0; i < digits; ++i) s += hex[rng() & 15];
    return s;
}

std::string file_xxh3(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    SLUICE_CHECK(f, path, ": cannot read");
    XXH3_state_t* st = XXH3_createState();
    XXH3_64bits_reset(st);
    std::vector<char> buf(1 << 20);
    while (f.read(buf.data(), std::streamsize(buf.size())) || f.gcount() > 0)
        XXH3_64bits_update(st, buf.data(), size_t(f.gcount()));
    const uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
    return hex;
}

std::string with_suffix(const std::string& path, const std::string& suffix) {
    const std::string ext = ".jsonl";
    if (path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0)
        return path.substr(0, path.size() - ext.size()) + suffix;
    return path + suffix;
}

IdKey id_key(const std::string& custom_id) {
    const XXH128_hash_t h = XXH3_128bits(custom_id.data(), custom_id.size());
    return {h.low64, h.high64};
}

LineReader::LineReader(const std::string& path) : file_(path, std::ios::binary) {
    SLUICE_CHECK(file_, path, ": cannot read");
}

bool LineReader::next() {
    offset_ = end_;
    if (!std::getline(*in_, text_)) return false;
    terminated_ = !in_->eof();
    end_ = offset_ + text_.size() + (terminated_ ? 1 : 0);
    ++line_no_;
    if (!text_.empty() && text_.back() == '\r') text_.pop_back();
    if (line_no_ == 1 && text_.rfind("\xEF\xBB\xBF", 0) == 0) text_.erase(0, 3);
    return true;
}

std::string dump_line(const nlohmann::ordered_json& j) {
    return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

JsonlAppender::JsonlAppender(const std::string& path) : path_(path) {
    f_ = std::fopen(path.c_str(), "ab");
    SLUICE_CHECK(f_, path, ": cannot open for appending");
}

JsonlAppender::~JsonlAppender() {
    if (f_) std::fclose(f_);
}

void JsonlAppender::write_raw(const std::string& s) {
    SLUICE_CHECK(std::fwrite(s.data(), 1, s.size(), f_) == s.size() && std::fflush(f_) == 0, path_,
                 ": write failed (disk full?)");
    const auto now = std::chrono::steady_clock::now();
    if (now - last_sync_ > std::chrono::seconds(2)) sync();
}

void JsonlAppender::sync() {
    std::fflush(f_);
    ::fsync(fileno(f_));
    last_sync_ = std::chrono::steady_clock::now();
}

void create_parent_dirs(const std::string& path) {
    const fs::path parent = fs::path(path).parent_path();
    if (parent.empty()) return;
    std::error_code ec;
    fs::create_directories(parent, ec);
    SLUICE_CHECK(!ec, path, ": cannot create its folder (", ec.message(), ")");
}

void write_file_atomically(const std::string& path, const std::string& text) {
    const std::string tmp = path + ".tmp";
    {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        SLUICE_CHECK(f, tmp, ": cannot write");
        f << text;
        f.flush();
        SLUICE_CHECK(f, tmp, ": write failed (disk full?)");
    }
    fs::rename(tmp, path);
}

}  // namespace sluice::api
