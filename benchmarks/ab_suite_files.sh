#!/usr/bin/env bash
# The suite's build-heavy files in one checkout, as `make test` runs them (2 workers, a file
# per work unit), with the wall and CPU seconds of the whole run:
#
#   bash benchmarks/ab_suite_files.sh CHECKOUT [PYTHON]
#
# Run it on two checkouts in alternating order (base, head, then head, base) to compare
# them side by side on a shared machine; PYTHON defaults to this project's .venv (the
# other checkout's code is what PYTHONPATH points at). A checkout made with `git worktree
# add` needs demo/raw and target/partial_parse.msgpack copied in from a checkout that ran
# `make demo`. benchmarks/results/suite_unit_tests_ab.json is one such comparison.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
checkout="$(cd "$1" && pwd)"
python="${2:-$here/.venv/bin/python}"
cd "$checkout"
export PYTHONPATH="$checkout" DBT_PROFILES_DIR="$checkout/profiles" DBT_SEND_ANONYMOUS_USAGE_STATS=False \
  MPLCONFIGDIR="$checkout/.mplconfig" HF_HUB_OFFLINE=1 GX_ANALYTICS_ENABLED=False
rm -rf results/fixture
/usr/bin/time -f "$checkout %e s wall %U user %S sys" "$python" -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder \
  tests/python/test_dbt_build.py tests/python/test_no_silent_wrong_result.py tests/python/test_shared_raw.py \
  tests/python/test_current_state.py tests/python/test_compare.py tests/python/test_paper_dbt.py 2>&1 | tail -2 || true
