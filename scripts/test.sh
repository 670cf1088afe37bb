#!/usr/bin/env bash
# Install danlu with everything its tests need, then lint, type-check and run the whole suite.
# Works on a fresh machine: it installs what it uses. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

pip_install() { python3 -m pip install --quiet --disable-pip-version-check "$@"; }

# Real services the tests start themselves (Debian packages): PostgreSQL for the store tests,
# Prometheus to scrape the server's /metrics, chromium to drive the dashboard, Slurm and
# munge for the Slurm executor.
missing=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
{ [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ]; } || missing+=(slurm-wlm)
[ -x /usr/sbin/munged ] || missing+=(munge)
if [ ${#missing[@]} -gt 0 ]; then
  sudo_=""; [ "$(id -u)" = 0 ] || sudo_="sudo"
  $sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# Fail instead of skipping when a service the suite needs is missing.
export DANLU_TEST_REQUIRE_POSTGRES=1 DANLU_TEST_REQUIRE_PROMETHEUS=1 DANLU_TEST_REQUIRE_BROWSER=1 \
  DANLU_TEST_REQUIRE_SLURM=1 DANLU_TEST_REQUIRE_RAY=1

# The CPU build of torch first: with it installed, the `train` extra's torch range is already
# satisfied and pip never downloads a CUDA build.
pip_install "torch==2.13.0"
pip_install -e ".[train,dev,ray,hpo]"

echo "== ruff"
python3 -m ruff check src tests benchmarks examples
python3 -m ruff format --check src tests benchmarks examples
echo "== mypy"
python3 -m mypy src/danlu benchmarks
echo "== pytest"
# Tests run in parallel (pytest-xdist), one worker per CPU and one more unless
# DANLU_TEST_WORKERS says otherwise (0: in this process): many tests spend seconds waiting on
# processes they started (control planes, daemons, training runs), a time the extra worker
# fills. Modules marked with the same `xdist_group` (the Ray and the Slurm clusters) share
# one worker so that two such clusters never start at once.
workers="${DANLU_TEST_WORKERS:-$(($(nproc) + 1))}"
python3 -m pytest -q -p no:cacheprovider -n "$workers" --dist loadgroup "$@"
