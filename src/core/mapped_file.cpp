#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/stable_memory.h"

namespace sluice {

MappedFile::MappedFile(const std::string& path) : path_(path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(path, ": cannot open: ", std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        int e = errno;
        ::close(fd);
        fail(path, ": cannot stat: ", std::strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        fail(path, ": not a regular file");
    }
    size_bytes_ = size_t(st.st_size);
    if (size_bytes_ > 0) {
        void* p = ::mmap(nullptr, size_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            ::close(fd);
            fail(path, ": cannot map ", size_bytes_, " bytes: ", std::strerror(e));
        }
        data_ = static_cast<const uint8_t*>(p);
        stable_id_ = stable_memory::add(data_, size_bytes_);
    }
    ::close(fd);
}

MappedFile::~MappedFile() {
    if (stable_id_) stable_memory::remove(stable_id_);
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_bytes_);
}

}  // namespace sluice
