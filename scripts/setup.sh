#!/usr/bin/env bash
# Installs what GeoSync needs on a fresh Debian machine, from the project's own files, for one purpose:
#   --for demo   what scripts/demo.sh needs: JDK 17 and Maven (Debian packages, when missing), a Python 3.11
#                virtualenv (.venv) with the project, the pinned Pulsar distribution (from Maven Central,
#                cached) and the broker plugins (a Maven build of interceptors/, cached by source hash).
#   --for test   (the default) all of that, the dev, spark and containers extras, stress-ng (a Debian
#                package, when missing: the CPU hog of 'bench/scale.py --cpu-hog'), and two tools built with
#                Go into .venv/bin: promtool (the chart's alert-rule tests) and toxiproxy-server (the lab's
#                WAN, 'geoctl lab up --wan'). Without Go both are skipped with a warning.
# One line per step; what the tools print goes to a log (GEOSYNC_SETUP_LOG, default
# ${TMPDIR:-/tmp}/geosync-setup.log), whose last lines are shown when a step fails. Safe to run again:
# every step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

purpose=test
while [ $# -gt 0 ]; do
  case "$1" in
    --for) purpose=${2:-}; shift 2 || shift ;;
    --for=*) purpose=${1#--for=}; shift ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "setup: unknown argument '$1' (usage: scripts/setup.sh [--for demo|test])" >&2; exit 2 ;;
  esac
done
case "$purpose" in
  demo|test) ;;
  *) echo "setup: --for takes demo or test, not '$purpose'" >&2; exit 2 ;;
esac

log=${GEOSYNC_SETUP_LOG:-${TMPDIR:-/tmp}/geosync-setup.log}
: >"$log"

# step TITLE COMMAND...: runs COMMAND with its output in the log and says how long it took; on failure shows
# the log's tail and returns COMMAND's status.
step() {
  local title=$1 started=$SECONDS rc=0
  shift
  printf 'setup: %s ... ' "$title"
  echo "== $title" >>"$log"
  "$@" >>"$log" 2>&1 || rc=$?
  if [ "$rc" = 0 ]; then
    echo "done ($((SECONDS - started)) s)"
  else
    echo "FAILED (exit $rc); the last lines of $log:"
    tail -n 25 "$log" | sed 's/^/  | /'
  fi
  return "$rc"
}

need_apt=()
command -v java >/dev/null 2>&1 || need_apt+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || need_apt+=(maven)
# The benches' CPU hog (bench/scale.py --cpu-hog: the 10,000-subscription step beside a loaded core).
if [ "$purpose" = test ]; then
  command -v stress-ng >/dev/null 2>&1 || need_apt+=(stress-ng)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  step "Debian packages ${need_apt[*]} (apt-get)" \
    sh -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ${need_apt[*]}"
fi

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
"$PY" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' 2>/dev/null || {
  echo "setup: GeoSync needs Python 3.11 (found $("$PY" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2
  exit 1
}
if [ ! -x .venv/bin/python ]; then
  step "Python virtualenv .venv" "$PY" -m venv .venv
fi

# The stamp names what was installed ("demo" or "test"); a test install covers the demo too.
stamp=.venv/.geosync-installed
installed=$(cat "$stamp" 2>/dev/null || true)
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ] \
    || { [ "$purpose" = test ] && [ "$installed" != test ]; }; then
  if [ "$purpose" = test ]; then target=".[dev,spark,containers]"; what="the project with its dev, spark and containers extras (first time: a few minutes, pyspark is large)"
  else target="."; what="the project and its dependencies"; fi
  # constraints.txt pins the tools and libraries the checks were last green with (CI installs the same).
  # PYTHONWARNINGS: setuptools warns on every editable install of a project whose packages live under
  # several directories (controller/, admin_cli/, spark_jobs/); that is how this one is laid out on purpose.
  step "Python packages: $what" sh -c "
    .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip &&
    PYTHONWARNINGS='ignore:Editable installation' .venv/bin/python -m pip install -q \
      --disable-pip-version-check -c constraints.txt -e '$target'"
  echo "$purpose" >"$stamp"
fi

step "Pulsar distribution (Maven Central, cached under ~/.cache/geosync)" \
  .venv/bin/python -c 'from geosync_lab import distribution as d; d.check_java(); print(d.ensure_pulsar())'
step "GeoSync broker plugins (Maven build of interceptors/, cached by source hash)" \
  .venv/bin/python -c 'from geosync_lab import plugins; print(plugins.ensure_plugins())'

[ "$purpose" = test ] || exit 0

# The docs site's diagrams are drawn in the reader's browser by mermaid. Material for MkDocs fetches it from
# unpkg.com at view time unless the page already has it: this puts a pinned copy beside the pages
# (docs/assets/javascripts/, not committed; mkdocs.yml loads it), so the built site draws them offline.
# npm checks the tarball against the registry's integrity; we check it against the pinned one as well.
MERMAID_VERSION=11.17.2
MERMAID_SHA512=V6K3C8EBdEsPFZXSKMJe6ppQOENxuHARr9GvHX4hh47lAbhMRD9qf4oEK7LoaRQxULMa80/qt5gHO73aCleBBg==
mermaid_js=docs/assets/javascripts/mermaid-$MERMAID_VERSION.min.js
vendor_mermaid() {
  local cache=${XDG_CACHE_HOME:-$HOME/.cache}/geosync tgz
  tgz=$cache/mermaid-$MERMAID_VERSION.tgz
  mkdir -p "$cache" "$(dirname "$mermaid_js")"
  if [ ! -f "$tgz" ]; then
    (cd "$cache" && npm pack --silent "mermaid@$MERMAID_VERSION") || return 1
  fi
  [ "$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)" = "$MERMAID_SHA512" ] || {
    echo "$tgz: sha512 differs from the pinned one"
    rm -f "$tgz"
    return 1
  }
  tar -xzOf "$tgz" package/dist/mermaid.min.js >"$mermaid_js.tmp" && mv "$mermaid_js.tmp" "$mermaid_js"
}
if [ ! -s "$mermaid_js" ]; then
  if command -v npm >/dev/null 2>&1; then
    step "mermaid $MERMAID_VERSION for the docs' diagrams (npm registry, cached)" vendor_mermaid \
      || echo "setup: the docs site will load mermaid from unpkg.com when read" >&2
  else
    echo "setup: no npm: the docs site will load mermaid from unpkg.com when read" >&2
  fi
fi

GO=$(command -v go || echo /usr/local/go/bin/go)

# go_tool NAME VERSION PACKAGE STAMP SUMMARY: a pinned 'go install' into .venv/bin/NAME, its version kept in
# .venv/STAMP (skipped when that version is there). Everything else works without these tools: the tests
# that need them say they were skipped.
go_tool() {
  local name=$1 version=$2 package=$3 stamp=.venv/$4 summary=$5 gobin
  if [ -x ".venv/bin/$name" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$version" ]; then
    return 0
  fi
  if [ ! -x "$GO" ]; then
    echo "setup: no Go toolchain: $name not installed ($summary)" >&2
    return 0
  fi
  gobin=$(mktemp -d)
  if step "$name $version (go install; first time: several minutes)" \
      env GOBIN="$gobin" "$GO" install "$package@$version"; then
    mv "$gobin/$(basename "$package")" ".venv/bin/$name"
    echo "$version" >"$stamp"
  else
    echo "setup: building $name failed: $summary" >&2
  fi
  rm -rf "$gobin"
}

# promtool checks and unit-tests the chart's alert rules; v0.316.0 is the Go module version of Prometheus
# v3.x's promtool.
go_tool promtool v0.316.0 github.com/prometheus/prometheus/cmd/promtool .promtool-version \
  "the chart's rule tests will be skipped"
# toxiproxy-server is the lab's WAN (latency, jitter, bandwidth and partitions between regions, see
# 'geoctl lab wan'), under the name its releases use.
go_tool toxiproxy-server v2.12.0 github.com/Shopify/toxiproxy/v2/cmd/server .toxiproxy-version \
  "labs boot without a WAN (no 'geoctl lab up --wan')"
