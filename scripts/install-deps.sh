#!/usr/bin/env bash
# Installs everything sluice needs to build and test, from Debian packages only (no downloads at build time).
# Safe to run repeatedly. Needs root (or sudo) for apt-get.
set -euo pipefail
packages=(
    build-essential cmake ninja-build pkg-config git ccache
    nlohmann-json3-dev libcli11-dev liburing-dev libxxhash-dev libpcre2-dev zlib1g-dev
    libgtest-dev libgmock-dev libbenchmark-dev
    clang-14 libclang-rt-14-dev lld python3-venv  # lld: the ASan build links its ~80 programs with it (3x faster)
    # The arm64 cross build (the `arm64` preset; docs/arm64.md): Debian's aarch64 toolchain, qemu-user to run its
    # tests, and the arm64 builds of the libraries the tests link (multiarch: needs the arm64 architecture added).
    g++-aarch64-linux-gnu qemu-user libgtest-dev:arm64 libxxhash-dev:arm64 zlib1g-dev:arm64
)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all ${#packages[@]} packages present"
    exit 0
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
if ! { dpkg --print-architecture; dpkg --print-foreign-architectures; } | grep -qx arm64; then
    echo "install-deps: adding the arm64 architecture (multiarch) for the cross build's libraries"
    $SUDO dpkg --add-architecture arm64
fi
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
