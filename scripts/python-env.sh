#!/usr/bin/env bash
# Makes .venv with the Python packages the client tests use, from PyPI: the official openai package, and
# lm-evaluation-harness (lm-eval, pinned, with its API extras; no torch) for the end-to-end harness test
# (tests/python/test_lm_eval.py). Only the tests need them; sluice itself has no Python dependency. Safe to run
# repeatedly. Measured on the 2-core machine: about 60 s for lm-eval and its dependencies with an empty pip cache.
set -euo pipefail
cd "$(dirname "$0")/.."
have() { [ -x .venv/bin/python3 ] && .venv/bin/python3 -c "import $1" 2>/dev/null; }
[ -x .venv/bin/python3 ] || python3 -m venv .venv
pip=(.venv/bin/python3 -m pip install --quiet --disable-pip-version-check)
have openai || "${pip[@]}" "openai>=1.40,<3"
have lm_eval || "${pip[@]}" "lm-eval[api]==0.4.13"
echo "python-env: .venv has openai $(.venv/bin/python3 -c 'import openai; print(openai.__version__)')," \
     "lm-eval $(.venv/bin/python3 -c 'import importlib.metadata as m; print(m.version("lm_eval"))')"
