#!/usr/bin/env bash
# Builds the release preset and runs the whole test suite (unit, model fixtures, CLI). The README's test command.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# The Python client tests need openai and lm-eval from PyPI; without network they are skipped, not failed.
bash scripts/python-env.sh ||
    echo "test: could not install the Python packages; the OpenAIClient, EvalEndpoints and LmEvalHarness tests will be skipped"
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"
ctest --preset release -j "$(nproc)"
