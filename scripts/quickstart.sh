#!/usr/bin/env bash
# Sets everything up on a fresh machine and runs the main job: installs Debian packages, builds sluice, makes the
# built-in default model (a small Kimi-K2-shaped random-weight checkpoint, on first use, in ~/.cache/sluice) and
# generates from it, printing the text and the speed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target sluice
./build/release/bin/sluice demo "$@"
