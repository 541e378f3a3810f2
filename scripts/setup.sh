#!/usr/bin/env bash
# Installs everything GeoSync needs on a fresh Debian machine, from the project's own files:
# Debian packages (JDK 17, Maven) if missing, a Python 3.11 virtualenv with the project and its
# dev/spark extras, and the pinned Pulsar server distribution from Maven Central (cached).
# Safe to run again: every step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v java >/dev/null 2>&1 || need_apt+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || need_apt+=(maven)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing ${need_apt[*]} with apt-get"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
"$PY" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' || {
  echo "setup: GeoSync needs Python 3.11 (found $("$PY" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2
  exit 1
}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.geosync-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
  echo "setup: installing Python packages into .venv (first time: a few minutes, pyspark is large)"
  .venv/bin/python -m pip install -q --upgrade pip
  # constraints.txt pins the tools and libraries the checks were last green with (CI installs the same).
  .venv/bin/python -m pip install -q -c constraints.txt -e ".[dev,spark,containers]"
  touch "$stamp"
fi

echo "setup: Pulsar distribution"
.venv/bin/python -c 'from geosync_lab import distribution as d; d.check_java(); print("  ", d.ensure_pulsar())'
echo "setup: GeoSync broker plugins (Maven build of interceptors/, cached by source hash)"
.venv/bin/python -c 'from geosync_lab import plugins; print("  ", plugins.ensure_plugins())'

# promtool (checks and unit-tests the chart's alert rules): a pinned Go build into the venv's bin.
PROMETHEUS_MODULE_VERSION=v0.316.0   # Go module version of Prometheus v3.x's promtool
if [ ! -x .venv/bin/promtool ] || [ "$(cat .venv/.promtool-version 2>/dev/null)" != "$PROMETHEUS_MODULE_VERSION" ]; then
  GO=$(command -v go || echo /usr/local/go/bin/go)
  if [ -x "$GO" ]; then
    echo "setup: promtool $PROMETHEUS_MODULE_VERSION (go install; first time: several minutes)"
    if GOBIN="$PWD/.venv/bin" "$GO" install "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_MODULE_VERSION"; then
      echo "$PROMETHEUS_MODULE_VERSION" > .venv/.promtool-version
    else
      # Everything else works without it; the rule tests say they were skipped and why.
      echo "setup: building promtool failed: the chart's rule tests will be skipped" >&2
    fi
  else
    echo "setup: no Go toolchain: promtool not installed (the chart's rule tests will be skipped)" >&2
  fi
fi

# toxiproxy-server (the lab's WAN: latency, jitter, bandwidth and partitions between regions, see
# 'geoctl lab wan'): a pinned Go build into the venv's bin, under the name its releases use.
TOXIPROXY_VERSION=v2.12.0
if [ ! -x .venv/bin/toxiproxy-server ] || [ "$(cat .venv/.toxiproxy-version 2>/dev/null)" != "$TOXIPROXY_VERSION" ]; then
  GO=$(command -v go || echo /usr/local/go/bin/go)
  if [ -x "$GO" ]; then
    echo "setup: toxiproxy-server $TOXIPROXY_VERSION (go install; first time: about a minute)"
    gobin=$(mktemp -d)
    if GOBIN="$gobin" "$GO" install "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION" \
        && mv "$gobin/server" .venv/bin/toxiproxy-server; then
      echo "$TOXIPROXY_VERSION" > .venv/.toxiproxy-version
    else
      # Labs boot without it (replication then goes straight between regions; 'geoctl lab wan' says why).
      echo "setup: building toxiproxy-server failed: labs will boot without a WAN (no 'geoctl lab wan')" >&2
    fi
    rm -rf "$gobin"
  else
    echo "setup: no Go toolchain: toxiproxy-server not installed (labs will boot without a WAN)" >&2
  fi
fi
