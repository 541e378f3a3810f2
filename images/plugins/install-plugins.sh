#!/bin/sh
# The plugin image's entry point, run as an init container of every broker pod: copies GeoSync's broker
# plugin NAR(s) into the directory the broker loads interceptors and entry filters from (a volume shared
# with the broker container), then exits. Prints each NAR's SHA-256, so a broker's pod log tells which
# build it loads.
set -eu
dest=${1:-/pulsar/geosync}
src=${GEOSYNC_PLUGINS_SOURCE:-/geosync/plugins}
mkdir -p "$dest"
found=0
for nar in "$src"/*.nar; do
  [ -f "$nar" ] || continue
  name=$(basename "$nar")
  # Through a temporary name, so an interrupted copy never leaves a partial NAR under its real name.
  cp "$nar" "$dest/.$name.tmp"
  mv -f "$dest/.$name.tmp" "$dest/$name"
  echo "geosync: $name -> $dest ($(sha256sum "$dest/$name" | cut -d' ' -f1))"
  found=$((found + 1))
done
if [ "$found" -eq 0 ]; then
  echo "geosync: no plugin NAR in $src (the image was built without one)" >&2
  exit 1
fi
