#!/usr/bin/env bash
# Builds the release preset and runs the whole test suite (unit, model fixtures, CLI). The README's test command.
# Then, where the aarch64 cross toolchain and qemu-user are installed (scripts/install-deps.sh installs them), the
# arm64 step: the op harness and the fixture tests cross-built for AArch64 and run under qemu (docs/arm64.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# The Python client tests need openai and lm-eval from PyPI; without network they are skipped, not failed.
bash scripts/python-env.sh ||
    echo "test: could not install the Python packages; the OpenAIClient, EvalEndpoints and LmEvalHarness tests will be skipped"
cmake --preset release >/dev/null
start=$SECONDS
cmake --build --preset release -j "$(nproc)"
echo "== release build: $((SECONDS - start)) s"
start=$SECONDS
ctest --preset release -j "$(nproc)"
echo "== release tests: $((SECONDS - start)) s"

if command -v aarch64-linux-gnu-g++ >/dev/null && command -v qemu-aarch64 >/dev/null; then
    echo "== arm64: op harness and fixture tests cross-built for AArch64, run under qemu-user (NEON and portable paths)"
    start=$SECONDS
    cmake --preset arm64 >/dev/null
    cmake --build --preset arm64 -j "$(nproc)"
    # An emulated CPU with every extension (dotprod, bf16, i8mm, SVE); OpHarnessArmv8 sets a plain Armv8.0 one.
    QEMU_CPU=max ctest --preset arm64 -j "$(nproc)"
    echo "== arm64: done in $((SECONDS - start)) s"
else
    echo "== arm64: skipped (no aarch64-linux-gnu-g++ or qemu-aarch64; scripts/install-deps.sh installs them)"
fi
