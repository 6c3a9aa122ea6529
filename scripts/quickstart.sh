#!/usr/bin/env bash
# Sets everything up on a fresh machine and runs the main job: installs Debian packages, builds sluice and
# generates from the trained default model the repository ships (models/sluice-k2-tiny, made by tools/train), its
# experts streamed from disk under a small memory budget, printing the text, the speed and the engine's statistics.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target sluice
./build/release/bin/sluice demo "$@"
