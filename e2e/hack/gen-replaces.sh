#!/usr/bin/env bash
# Regenerates the staging `replace` block of e2e/go.mod from k8s.io/kubernetes'
# own go.mod: that module replaces every staging module with ./staging/src/...,
# which its module zip lacks, so each must point at the published module.
set -euo pipefail
cd "$(dirname "$0")/.."
K8S_VERSION=${K8S_VERSION:-v1.37.2}
STAGING_VERSION=${STAGING_VERSION:-v0.${K8S_VERSION#v1.}}
mod=$(go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')
[ -f "$mod" ] || { echo "cannot find the go.mod of k8s.io/kubernetes@${K8S_VERSION}" >&2; exit 1; }
args=()
while read -r name; do
  args+=("-replace=${name}=${name}@${STAGING_VERSION}")
done < <(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\1#p' "$mod")
echo "${#args[@]} staging modules -> ${STAGING_VERSION}"
go mod edit "${args[@]}"
