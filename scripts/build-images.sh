#!/usr/bin/env bash
# Builds GeoSync's two container images with podman, then runs each once:
#   REGISTRY/agent:VERSION           the agent (images/agent/Containerfile; context: this repository)
#   REGISTRY/broker-plugins:VERSION  the broker plugin NAR and the init-container entry point that copies it
#                                    (images/plugins/Containerfile; context: the NAR staged with its script)
# VERSION is pyproject.toml's, the chart's appVersion (its default image tag). REGISTRY is
# GEOSYNC_IMAGE_REGISTRY, default localhost/geosync; push with `podman push` where a registry is reachable.
#
# Bases: GEOSYNC_PYTHON_BASE / GEOSYNC_BUSYBOX_BASE if set; else the official python:3.11-slim-bookworm and
# busybox images if podman has or can pull them; else bases made here from Debian packages (no registry
# needed): bookworm by debootstrap with Debian's python3 (3.11), and Debian's static busybox. Those are
# built once and kept in podman's store (GEOSYNC_REBUILD_BASES=1 makes them again).
#
# Needs root (debootstrap, podman's rootful store). Installs podman, runc and debootstrap with apt-get if
# missing (scripts/setup.sh does not; integration_tests/test_images.py runs this script).
set -euo pipefail
cd "$(dirname "$0")/.."
# debootstrap and friends install to sbin, which a non-login shell's PATH (cron, CI, env -i) may lack.
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

VERSION=$(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
REGISTRY=${GEOSYNC_IMAGE_REGISTRY:-localhost/geosync}
AGENT_IMAGE=$REGISTRY/agent:$VERSION
PLUGINS_IMAGE=$REGISTRY/broker-plugins:$VERSION
DEBIAN_MIRROR=${GEOSYNC_DEBIAN_MIRROR:-http://deb.debian.org/debian}
LOCAL_PYTHON_BASE=localhost/geosync/python:3.11-bookworm
LOCAL_BUSYBOX_BASE=localhost/geosync/busybox:bookworm

need=()
command -v podman >/dev/null 2>&1 || need+=(podman)
command -v runc >/dev/null 2>&1 || need+=(runc)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
if [ ${#need[@]} -gt 0 ]; then
  echo "build-images: installing ${need[*]} with apt-get"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# runc, not crun: crun refuses hosts whose cgroup v2 mount sits beside v1 controllers ("cgroups in hybrid
# mode not supported"), as on our sandboxed machines.
# Open files and processes: podman's defaults (1048576, 32768) can be more than a root without
# CAP_SYS_RESOURCE may set ("setrlimit RLIMIT_NOFILE: Operation not permitted"), and podman lowers its own
# process limit to 32768 before starting anything. Ask for the host's hard limits within those defaults.
capped() {  # LIMIT CAP
  if [ "$1" = unlimited ] || [ "$1" -gt "$2" ]; then echo "$2"; else echo "$1"; fi
}
nofile=$(capped "$(ulimit -Hn)" 1048576)
nproc=$(capped "$(ulimit -Hu)" 32768)
RUN_FLAGS=(--runtime "${GEOSYNC_OCI_RUNTIME:-runc}"
           --ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

have_or_pull() {
  podman image exists "$1" || timeout 120 podman pull -q "$1" >/dev/null 2>&1
}

import_rootfs() {  # DIR IMAGE CMD-JSON
  tar --numeric-owner -C "$1" -c . |
    podman import -q --change "CMD $3" --change 'ENV LANG=C.UTF-8' - "$2" >/dev/null
}

make_python_base() {
  echo "build-images: making $LOCAL_PYTHON_BASE (debootstrap bookworm minbase + python3, about a minute)"
  local root=$work/python-rootfs
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    bookworm "$root" "$DEBIAN_MIRROR" >"$work/debootstrap.log" 2>&1 || {
    tail -20 "$work/debootstrap.log" >&2; exit 1
  }
  chroot "$root" python3 -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version'
  # What a slim image leaves out: package caches and lists, documentation, translations.
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin "$root"/var/lib/apt/lists/* \
    "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/locale/*
  import_rootfs "$root" "$LOCAL_PYTHON_BASE" '["python3"]'
}

make_busybox_base() {
  echo "build-images: making $LOCAL_BUSYBOX_BASE (Debian's busybox-static)"
  local root=$work/busybox-rootfs
  mkdir -p "$root"/bin "$root"/tmp "$work/deb"
  (cd "$work/deb" && apt-get download -qq -o APT::Sandbox::User=root busybox-static >/dev/null)
  dpkg-deb -x "$work"/deb/busybox-static_*.deb "$work/deb/x"
  cp "$work/deb/x/bin/busybox" "$root/bin/busybox"
  chmod 1777 "$root/tmp"
  for applet in $("$root/bin/busybox" --list); do
    [ "$applet" = busybox ] || ln -s busybox "$root/bin/$applet"
  done
  import_rootfs "$root" "$LOCAL_BUSYBOX_BASE" '["/bin/sh"]'
}

pick_base() {  # OVERRIDE OFFICIAL LOCAL MAKER
  if [ -n "$1" ]; then echo "$1"; return; fi
  if have_or_pull "$2"; then echo "$2"; return; fi
  if [ "${GEOSYNC_REBUILD_BASES:-0}" = 1 ] || ! podman image exists "$3"; then "$4" >&2; fi
  echo "$3"
}

python_base=$(pick_base "${GEOSYNC_PYTHON_BASE:-}" docker.io/library/python:3.11-slim-bookworm \
  "$LOCAL_PYTHON_BASE" make_python_base)
busybox_base=$(pick_base "${GEOSYNC_BUSYBOX_BASE:-}" docker.io/library/busybox:1.36 \
  "$LOCAL_BUSYBOX_BASE" make_busybox_base)

labels=(--label "org.opencontainers.image.version=$VERSION"
        --label "org.opencontainers.image.revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)"
        --label "org.opencontainers.image.licenses=Apache-2.0")
# A network that re-signs TLS (a proxy's CA in PIP_CERT) is passed to the wheel build as a secret. Without
# one named, the host's own bundle: a proxy CA trusted by the host is then trusted by the build too (a shell
# with a clean environment lost PIP_CERT, and pip in the build failed on the proxy's certificate).
secret=()
ca=${GEOSYNC_PIP_CA:-${PIP_CERT:-${SSL_CERT_FILE:-${REQUESTS_CA_BUNDLE:-}}}}
if [ -z "$ca" ] && [ -s /etc/ssl/certs/ca-certificates.crt ]; then ca=/etc/ssl/certs/ca-certificates.crt; fi
if [ -n "$ca" ] && [ -s "$ca" ]; then secret=(--secret "id=pip-ca,src=$ca"); fi

echo "build-images: $AGENT_IMAGE (base $python_base)"
# --format docker: the OCI image format has no HEALTHCHECK.
podman build -q --format docker "${RUN_FLAGS[@]}" "${labels[@]}" "${secret[@]}" \
  --build-arg "BASE=$python_base" -f images/agent/Containerfile -t "$AGENT_IMAGE" . >/dev/null

echo "build-images: broker plugin NAR (Maven, cached by source hash)"
[ -x .venv/bin/python ] || { echo "build-images: run scripts/setup.sh first (it makes .venv)" >&2; exit 1; }
nar_dir=$(.venv/bin/python -c 'from geosync_lab import plugins; print(plugins.ensure_plugins())')
mkdir "$work/plugins"
cp "$nar_dir"/*.nar images/plugins/install-plugins.sh "$work/plugins/"
echo "build-images: $PLUGINS_IMAGE (base $busybox_base)"
podman build -q --format docker "${RUN_FLAGS[@]}" "${labels[@]}" \
  --build-arg "BASE=$busybox_base" -f images/plugins/Containerfile -t "$PLUGINS_IMAGE" "$work/plugins" >/dev/null

echo "build-images: running each once"
podman run --rm --no-healthcheck "${RUN_FLAGS[@]}" "$AGENT_IMAGE" --help >/dev/null
# The agent as the chart runs it (read-only root, no capabilities), for a region that is not there: it
# keeps running, retrying, and its HEALTHCHECK (/healthz) must pass. No network but its own loopback.
mkdir "$work/etc"
# Its own signing key (a throwaway, so readable by the container's user) and a keyring that lists it.
.venv/bin/python - "$work/etc" <<'PY'
import pathlib, sys
from geosync_adapters import signing
etc = pathlib.Path(sys.argv[1])
signer = signing.generate("nowhere-1")
private, _ = signing.write_key_pair(etc, signer)
private.chmod(0o644)
(etc / "keyring.yaml").write_text(signing.dump_keyring({"nowhere": {signer.key_id: signer.public()}}))
PY
printf '%s\n' 'region: nowhere' 'admin_url: http://127.0.0.1:9' 'service_url: pulsar://127.0.0.1:9' \
  'metrics_port: 9464' 'mirror_policies: false' 'signing_key_file: /etc/geosync/nowhere-1.key' \
  'signing_key_id: nowhere-1' 'keyring_file: /etc/geosync/keyring.yaml' >"$work/etc/agent.yaml"
chmod 0755 "$work/etc" && chmod 0644 "$work/etc/agent.yaml" "$work/etc/keyring.yaml" "$work/etc/nowhere-1.pub"
agent=geosync-agent-check-$$
podman run -d --name "$agent" "${RUN_FLAGS[@]}" --network none --read-only --read-only-tmpfs=false \
  --cap-drop ALL --security-opt no-new-privileges \
  -v "$work/etc:/etc/geosync:ro" "$AGENT_IMAGE" >/dev/null 2>&1
healthy=0
for _ in $(seq 30); do
  if podman healthcheck run "$agent" >/dev/null 2>&1; then healthy=1; break; fi
  sleep 1
done
# A container that exited (a crash at start) answers no exec: its uid is then unknown, and its logs say why.
uid=$(podman exec "$agent" id -u 2>/dev/null || echo "unknown: the container is $(podman inspect --format '{{.State.Status}}' "$agent" 2>/dev/null)")
logs=$(podman logs "$agent" 2>&1 | tail -5)
podman rm -f -t 5 "$agent" >/dev/null 2>&1
if [ "$healthy" != 1 ] || [ "$uid" = 0 ]; then
  echo "build-images: the agent image is not healthy (uid $uid) after 30 s:" >&2
  echo "$logs" >&2
  exit 1
fi
echo "build-images: agent healthy as uid $uid"
mkdir -m 0777 "$work/target"
podman run --rm "${RUN_FLAGS[@]}" -v "$work/target:/pulsar/geosync" "$PLUGINS_IMAGE"
for nar in "$nar_dir"/*.nar; do
  cmp -s "$nar" "$work/target/$(basename "$nar")" || {
    echo "build-images: the plugin image did not copy $(basename "$nar") intact" >&2; exit 1
  }
done
for image in "$AGENT_IMAGE" "$PLUGINS_IMAGE"; do
  echo "  $image $(podman image inspect --format '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1 / 1e6}')"
done
