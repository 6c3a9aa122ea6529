#include "runtime/state_dir.h"

#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/log.h"

namespace sluice {

namespace fs = std::filesystem;

namespace {
constexpr const char* k_ext = ".sluicest";
}

int64_t reusable_prefix(std::span<const int32_t> tokens, bool recurrent, int64_t snapshot_position,
                        std::span<const int32_t> prompt, int64_t max_tokens) {
    const size_t limit = std::min({tokens.size(), prompt.size(), size_t(std::max<int64_t>(max_tokens, 0))});
    const int64_t common =
        std::mismatch(tokens.begin(), tokens.begin() + std::ptrdiff_t(limit), prompt.begin()).first - tokens.begin();
    if (common == int64_t(tokens.size()) || !recurrent) return common;
    return snapshot_position >= 0 && common >= snapshot_position ? common : 0;
}

bool covers(std::span<const int32_t> tokens, int64_t snapshot_position, std::span<const int32_t> other,
            int64_t other_snapshot_position, bool recurrent) {
    const int64_t n = int64_t(other.size());
    if (n > int64_t(tokens.size()) || reusable_prefix(tokens, recurrent, snapshot_position, other, n) != n) return false;
    if (!recurrent) return true;
    const auto lowest = [](int64_t snap, int64_t size) { return snap >= 0 ? snap : size; };
    return lowest(other_snapshot_position, n) >= lowest(snapshot_position, int64_t(tokens.size()));
}

StateDir::StateDir(std::string dir, uint64_t capacity_bytes, StateFileModel model, bool recurrent)
    : dir_(std::move(dir)), capacity_(capacity_bytes), model_(std::move(model)), recurrent_(recurrent) {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec || !fs::is_directory(dir_)) {
        why_ = cat(dir_, ": cannot create the state directory (", ec ? ec.message() : "not a directory", ")");
        return;
    }
    const std::string probe = (fs::path(dir_) / ".sluice-write-test").string();
    {
        std::ofstream f(probe, std::ios::trunc);
        f << "probe";
        f.flush();
        if (!f.good()) {
            why_ = cat(dir_, ": the state directory is not writable");
            return;
        }
    }
    fs::remove(probe, ec);
    enabled_ = true;
    std::vector<Entry> found;
    for (const auto& de : fs::directory_iterator(dir_, ec)) {
        const std::string p = de.path().string();
        if (p.size() > 8 && p.ends_with(".partial")) {  // a write cut off by a crash: ours, incomplete
            fs::remove(de.path(), ec);
            continue;
        }
        if (!de.is_regular_file() || !p.ends_with(k_ext)) continue;
        try {
            StateFileInfo info = peek_state(p, model_);
            const auto t = fs::last_write_time(de.path(), ec);
            found.push_back({p, std::move(info.tokens), info.snapshot_position, info.file_bytes,
                             ec ? 0 : uint64_t(t.time_since_epoch().count())});
        } catch (const Error& e) {
            ++stats_.skipped_files;
            log_info("sluice: warning: state directory: skipping ", e.what());
        }
    }
    // order by file time; the clock continues after the newest
    std::sort(found.begin(), found.end(), [](const Entry& a, const Entry& b) { return a.last_use < b.last_use; });
    for (auto& e : found) add(std::move(e));
    evict_to(capacity_);
}

void StateDir::add(Entry e) {
    const uint64_t id = next_id_++;
    e.last_use = ++clock_;
    stats_.bytes += e.bytes;
    index_.add(id, e.tokens);
    lru_.emplace(e.last_use, id);
    entries_.emplace(id, std::move(e));
    stats_.entries = int64_t(entries_.size());
}

void StateDir::touch(Entry& e, uint64_t id) {
    lru_.erase(e.last_use);
    e.last_use = ++clock_;
    lru_.emplace(e.last_use, id);
    std::error_code ec;
    fs::last_write_time(e.path, fs::file_time_type::clock::now(), ec);
}

std::string StateDir::path_for(std::span<const int32_t> tokens) const {
    XXH3_state_t* st = XXH3_createState();
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, model_.architecture.data(), model_.architecture.size());
    XXH3_64bits_update(st, &model_.config_xxh3, sizeof model_.config_xxh3);
    XXH3_64bits_update(st, &model_.weights_xxh3, sizeof model_.weights_xxh3);
    XXH3_64bits_update(st, tokens.data(), tokens.size() * sizeof(int32_t));
    const uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    char name[64];
    std::snprintf(name, sizeof name, "%016llx-%zu%s", static_cast<unsigned long long>(h), tokens.size(), k_ext);
    return (fs::path(dir_) / name).string();
}

StateDir::Match StateDir::best(std::span<const int32_t> prompt, int64_t max_tokens) const {
    Match m;
    uint64_t m_use = 0;
    index_.visit(prompt, [&](uint64_t id, int64_t shared) {
        if (m.tokens >= shared + PrefixIndex::k_block_tokens) return false;  // no shallower file gives more
        const Entry& e = entries_.at(id);
        const int64_t n = reusable_prefix(e.tokens, recurrent_, e.snapshot_position, prompt, max_tokens);
        if (n > m.tokens || (n == m.tokens && n > 0 && e.last_use > m_use)) {
            m = {n, id};
            m_use = e.last_use;
        }
        return true;
    });
    return m;
}

bool StateDir::load(const Match& m, SequenceState& fresh) {
    auto it = entries_.find(m.entry);
    if (m.tokens <= 0 || it == entries_.end()) return false;
    Entry& e = it->second;
    try {
        load_state(e.path, model_, fresh);
    } catch (const Error& err) {
        log_info("sluice: warning: state directory: dropping ", err.what(), "; the prefix is computed instead");
        std::error_code ec;
        fs::remove(e.path, ec);
        remove(m.entry);
        return false;
    }
    touch(e, m.entry);
    ++stats_.hits;
    return true;
}

void StateDir::remove(uint64_t id) {
    auto it = entries_.find(id);
    if (it == entries_.end()) return;
    stats_.bytes -= it->second.bytes;
    index_.remove(id, it->second.tokens);
    lru_.erase(it->second.last_use);
    entries_.erase(it);
    stats_.entries = int64_t(entries_.size());
}

void StateDir::evict_to(uint64_t limit) {
    while (stats_.bytes > limit && !lru_.empty()) {
        const uint64_t oldest = lru_.begin()->second;
        std::error_code ec;
        fs::remove(entries_.at(oldest).path, ec);
        remove(oldest);
        ++stats_.evicted;
    }
}

void StateDir::store(const SequenceState& s) {
    if (!enabled_ || s.n_past() == 0) return;
    const auto tokens = s.tokens();
    const std::string path = path_for(tokens);
    // the same tokens already there: only its time changes; files whose prefixes this state serves as well go
    std::vector<uint64_t> covered;
    bool same = false;
    index_.visit(tokens, [&](uint64_t id, int64_t) {
        Entry& e = entries_.at(id);
        const int64_t n = int64_t(e.tokens.size());
        if (e.path == path && n == s.n_past()) {
            touch(e, id);
            same = true;
            return false;
        }
        if (covers(tokens, s.snapshot_position(), e.tokens, e.snapshot_position, recurrent_)) covered.push_back(id);
        return true;
    });
    if (same) return;
    const uint64_t estimate = state_file_bytes(s, model_);
    if (estimate > capacity_) return;
    for (uint64_t id : covered) {
        std::error_code ec;
        fs::remove(entries_.at(id).path, ec);
        remove(id);
        ++stats_.evicted;
    }
    for (int attempt = 0; attempt < 2; ++attempt) {
        evict_to(capacity_ - std::min(capacity_, estimate << attempt));
        try {
            save_state(s, model_, path);
            std::error_code ec;
            const uint64_t bytes = fs::file_size(path, ec);
            add({path, std::vector<int32_t>(tokens.begin(), tokens.end()), s.snapshot_position(),
                 ec ? estimate : bytes, 0});
            ++stats_.writes;
            evict_to(capacity_);
            return;
        } catch (const Error& e) {
            std::error_code ec;
            fs::remove(path + ".partial", ec);
            if (attempt == 1) {
                ++stats_.write_failures;
                log_info("sluice: warning: state directory: ", e.what(), "; the state is not kept on disk");
            }
        }
    }
}

}  // namespace sluice
