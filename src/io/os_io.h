// The operating system's ways around the page cache, in one place. Linux has O_DIRECT (reads from the drive straight
// into aligned buffers) and posix_fadvise(POSIX_FADV_DONTNEED) (drops what a buffered read pulled into the cache). On
// an OS without O_DIRECT, k_open_direct is 0 and DirectReader reads every file buffered, dropping the cache behind
// it where the OS can (macOS would set F_NOCACHE on the descriptor instead: docs/arm64.md). Building with
// -DSLUICE_NO_O_DIRECT takes that way on Linux too.
#pragma once

#include <fcntl.h>
#include <sys/types.h>

namespace sluice::io {

#if defined(O_DIRECT) && !defined(SLUICE_NO_O_DIRECT)
inline constexpr bool k_have_o_direct = true;
inline constexpr int k_open_direct = O_DIRECT;
#else
inline constexpr bool k_have_o_direct = false;
inline constexpr int k_open_direct = 0;
#endif

// Drops [offset, offset + length) of fd from the page cache (length 0: to the end) where the OS can; false elsewhere.
inline bool drop_from_page_cache(int fd, off_t offset, off_t length) {
#if defined(POSIX_FADV_DONTNEED)
    return ::posix_fadvise(fd, offset, length, POSIX_FADV_DONTNEED) == 0;
#else
    (void)fd, (void)offset, (void)length;
    return false;
#endif
}

}  // namespace sluice::io
