#!/usr/bin/env bash
# Install danlu with everything its tests need, then lint, type-check and run the whole suite.
# Works on a fresh machine: it installs what it uses. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

pip_install() { python3 -m pip install --quiet --disable-pip-version-check "$@"; }

# The CPU build of torch first: with it installed, the `train` extra's torch range is already
# satisfied and pip never downloads a CUDA build.
pip_install "torch==2.13.0"
pip_install -e ".[train,dev]"

echo "== ruff"
python3 -m ruff check src tests benchmarks examples
echo "== mypy"
python3 -m mypy src/danlu/core src/danlu/sched src/danlu/sim src/danlu/cli
echo "== pytest"
python3 -m pytest -q -p no:cacheprovider "$@"
