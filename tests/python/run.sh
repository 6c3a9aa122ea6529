#!/usr/bin/env bash
# Runs a Python test with the project's virtual environment (.venv, made by scripts/python-env.sh) when there is
# one, else with the system python3. The test itself exits 77 (skip) when a package it needs is missing.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
py="$root/.venv/bin/python3"
[ -x "$py" ] || py=python3
exec "$py" "$@"
