#!/usr/bin/env bash
# The main job on the embedded default: installs what is missing, boots a local lab of three real
# Pulsar regions (with agents, where built) and runs a short live demonstration of a consumer failing
# over from one region to another. Leaves the lab running in ./lab; stop it with
# '.venv/bin/geoctl lab down --dir lab'.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/geoctl lab up --regions a,b,c --dir lab
.venv/bin/geoctl lab status --dir lab
.venv/bin/geoctl demo failover --dir lab "$@"
