# Cross build for 64-bit ARM Linux with Debian's aarch64 toolchain (g++-aarch64-linux-gnu) and the arm64 builds of
# the libraries from Debian multiarch (dpkg --add-architecture arm64; scripts/install-deps.sh installs both). The
# `arm64` preset uses this file; ctest runs the test programs under qemu-user (qemu-aarch64), and QEMU_CPU picks
# the emulated CPU (max: every extension; cortex-a57: plain Armv8.0). docs/arm64.md says more.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Libraries from /usr/lib/aarch64-linux-gnu (multiarch), never the host's /usr/lib/x86_64-linux-gnu.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")
# libstdc++ and libgcc linked in, so the programs need only the multiarch arm64 libraries (libc6:arm64, libxxhash0,
# ...) at run time, which qemu-user finds under /lib/aarch64-linux-gnu. (Not the cross toolchain's own libc in
# /usr/aarch64-linux-gnu, qemu's -L: with Debian 12's libc6-arm64-cross 2.36-8cross1 under qemu 7.2 the first
# pthread_create never returns.)
set(CMAKE_EXE_LINKER_FLAGS_INIT "-static-libstdc++ -static-libgcc")
# Test programs (and gtest's test discovery at build time) run under qemu-user.
find_program(SLUICE_QEMU_AARCH64 NAMES qemu-aarch64 qemu-aarch64-static)
if (SLUICE_QEMU_AARCH64)
    set(CMAKE_CROSSCOMPILING_EMULATOR ${SLUICE_QEMU_AARCH64})
endif()
