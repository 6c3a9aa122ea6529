// Scratch directories for tests: made fresh and empty, removed when the test process exits (ctest runs every test
// in a process of its own), so repeated runs leave nothing behind in the temporary directory. Set
// SLUICE_KEEP_TEST_DIRS=1 to keep them, to look at what a failing test wrote.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

#include <unistd.h>

namespace sluice::test {

class ScratchDirs {
public:
    static ScratchDirs& instance() {
        static ScratchDirs dirs;
        return dirs;
    }
    void add(const std::filesystem::path& p) {
        std::lock_guard<std::mutex> lock(mu_);
        paths_.push_back(p);
    }
    ~ScratchDirs() {
        if (std::getenv("SLUICE_KEEP_TEST_DIRS")) return;
        for (const auto& p : paths_) {
            std::error_code ec;
            std::filesystem::remove_all(p, ec);
        }
    }

private:
    std::mutex mu_;
    std::vector<std::filesystem::path> paths_;
};

// Empties and creates `dir`, and removes it when the process exits.
inline std::filesystem::path scratch_dir_at(const std::filesystem::path& dir) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    ScratchDirs::instance().add(dir);
    return dir;
}

// A fresh directory `sluice_test_<name>_<pid>` in the temporary directory, removed when the process exits.
inline std::filesystem::path scratch_dir(const std::string& name) {
    return scratch_dir_at(std::filesystem::temp_directory_path() /
                          ("sluice_test_" + name + "_" + std::to_string(::getpid())));
}

}  // namespace sluice::test
