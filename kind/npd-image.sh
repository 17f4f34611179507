#!/usr/bin/env bash
# Builds node-problem-detector's image offline and prints its name: the
# daemon built from the Go module proxy (e2e/hack/build-npd.sh, cached; the
# version the root module's plugin protocol comes from) on scratch, tagged
# as the upstream image (registry.k8s.io/node-problem-detector/...:<version>)
# so that NPD's own deployment/ manifests run it unchanged. Nothing is
# pulled. Usage: kind/npd-image.sh [path to the node-problem-detector binary]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-$(e2e/hack/build-npd.sh)}
version=$(go list -m -f '{{.Version}}' k8s.io/node-problem-detector)
image=registry.k8s.io/node-problem-detector/node-problem-detector:$version
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp "$bin" "$ctx/node-problem-detector"
# NPD's upstream image holds the daemon at /node-problem-detector (its
# DaemonSet's command) and /tmp for its own use.
mkdir -p "$ctx/tmp"
printf 'FROM scratch\nCOPY node-problem-detector /node-problem-detector\nCOPY tmp /tmp\nENTRYPOINT ["/node-problem-detector"]\n' > "$ctx/Dockerfile"
docker build -q -t "$image" "$ctx" >/dev/null
echo "$image"
