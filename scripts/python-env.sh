#!/usr/bin/env bash
# Makes .venv with the Python packages the client tests use (the official openai package), from PyPI. Only the
# tests need it; sluice itself has no Python dependency. Safe to run repeatedly.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -x .venv/bin/python3 ] && .venv/bin/python3 -c "import openai" 2>/dev/null; then
    echo "python-env: .venv has openai $(.venv/bin/python3 -c 'import openai; print(openai.__version__)')"
    exit 0
fi
python3 -m venv .venv
.venv/bin/python3 -m pip install --quiet --disable-pip-version-check "openai>=1.40,<3"
echo "python-env: .venv has openai $(.venv/bin/python3 -c 'import openai; print(openai.__version__)')"
