#!/usr/bin/env bash
# The whole test suite: static checks, unit and property tests, then the integration suite against a
# real three-region Pulsar lab (booted once for the session). Installs what is missing first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff"; ruff check . && ruff format --check .
echo "== mypy"; mypy controller admin_cli spark_jobs integration_tests tests bench
echo "== import-linter"; lint-imports
echo "== docs"; site="$(mktemp -d)"; NO_MKDOCS_2_WARNING=1 mkdocs build --strict -d "$site"; rm -rf "$site"  # not -q: it stops strict counting warnings
echo "== pytest"
pytest -q -p no:cacheprovider "$@"
