#!/usr/bin/env bash
# Builds the release preset and runs the whole test suite (unit, model fixtures, CLI). The README's test command.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"
ctest --preset release -j "$(nproc)"
