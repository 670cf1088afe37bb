#!/usr/bin/env bash
# Install danlu with everything its tests need, then lint, type-check and run the whole suite.
# Works on a fresh machine: it installs what it uses. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

pip_install() { python3 -m pip install --quiet --disable-pip-version-check "$@"; }

# Real services the tests start themselves (Debian packages): PostgreSQL for the store tests.
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  else
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  fi
fi
export DANLU_TEST_REQUIRE_POSTGRES=1  # CI fails instead of skipping when PostgreSQL is missing

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
