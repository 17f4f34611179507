#!/usr/bin/env bash
# Builds the offline kind node's root file system with debootstrap from
# Debian's packages (kind/node/packages.txt) and writes it as a tar file:
#   kind/node/rootfs.sh <out.tar>
# Needs root and debootstrap. DEBIAN_SUITE / DEBIAN_MIRROR override the
# defaults (bookworm, http://deb.debian.org/debian).
set -euo pipefail
out=${1:?usage: rootfs.sh <out.tar>}
here=$(cd "$(dirname "$0")" && pwd)
suite=${DEBIAN_SUITE:-bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
[ "$(id -u)" = 0 ] || { echo "rootfs.sh: debootstrap needs root" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "rootfs.sh: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }
pkgs=$(grep -v '^#' "$here/packages.txt" | xargs | tr ' ' ,)
work=$(mktemp -d "${TMPDIR:-/tmp}/certready-rootfs.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "rootfs: debootstrap $suite from $mirror with: $pkgs" >&2
debootstrap --variant=minbase --include="$pkgs" "$suite" "$work/root" "$mirror" > "$work/debootstrap.log" 2>&1 || {
  tail -n 30 "$work/debootstrap.log" >&2; echo "rootfs.sh: debootstrap failed (log above)" >&2; exit 1; }
# Package caches and lists are not part of a node.
rm -rf "$work/root/var/cache/apt/archives/"*.deb "$work/root/var/lib/apt/lists/"*
tar --numeric-owner --xattrs -C "$work/root" -cf "$out.tmp" .
mv "$out.tmp" "$out"
