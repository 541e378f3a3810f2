#!/usr/bin/env bash
# The five-minute tour on the embedded default. Installs what the demo needs and nothing more
# (scripts/setup.sh --for demo: JDK, Maven, the virtualenv, Pulsar, the broker plugins; no Go tools, no
# Spark), boots a local lab of three real Pulsar regions with an agent each, shows its health, then runs a
# consumer that acknowledges out of order in region a and fails over to region b, once with Pulsar's own
# replicated subscriptions (PIP-33) and once with GeoSync. Arguments go to 'geoctl demo failover'.
# Leaves the lab running in ./lab; stop it with '.venv/bin/geoctl lab down --dir lab'.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
bash scripts/setup.sh --for demo
.venv/bin/geoctl lab up --regions a,b,c --dir lab
.venv/bin/geoctl lab status --dir lab
.venv/bin/geoctl demo failover --dir lab "$@"
echo "demo: done in $((SECONDS - started)) s; the lab keeps running in ./lab"
echo "  stop it with '.venv/bin/geoctl lab down --dir lab'"
