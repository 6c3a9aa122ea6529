#!/usr/bin/env bash
# Builds the release preset and runs the whole test suite (unit, model fixtures, CLI). The README's test command.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# The openai client test needs the openai package from PyPI; without network it is skipped, not failed.
bash scripts/python-env.sh || echo "test: could not install the openai package; the OpenAIClient test will be skipped"
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"
ctest --preset release -j "$(nproc)"
