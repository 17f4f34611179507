#!/usr/bin/env bash
# Builds (once) node-problem-detector's daemon from the Go module proxy, at
# the version the root module's plugin protocol comes from, into a cache
# folder keyed by version, and prints the binary's path. The e2e suite runs
# it as the real consumer of `certready check` (built with its own go.mod,
# as upstream builds it; CGO off: no journald watcher, which the suite does
# not use).
set -euo pipefail
cd "$(dirname "$0")/../.."
version=$(go list -m -f '{{.Version}}' k8s.io/node-problem-detector)
dir=${CERTREADY_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/certready}/npd-${version}-$(go env GOOS)-$(go env GOARCH)
bin=$dir/node-problem-detector
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
mkdir -p "$dir"
echo "building node-problem-detector ${version} into $dir (about 2 minutes the first time)" >&2
start=$(date +%s)
tmp=$(mktemp -d "$dir/.build.XXXXXX")
trap 'chmod -R u+w "$tmp"; rm -rf "$tmp"' EXIT
# The module's source with its own go.mod and go.sum, built in place as its
# Makefile does (go install mod@version would ask the proxy for the version
# list, which a proxy may refuse).
go mod download k8s.io/node-problem-detector
src=$(go list -m -f '{{.Dir}}' k8s.io/node-problem-detector)
cp -r "$src" "$tmp/src"
chmod -R u+w "$tmp/src"
(cd "$tmp/src" && CGO_ENABLED=0 go build -trimpath \
  -ldflags "-s -w -X k8s.io/node-problem-detector/pkg/version.version=${version}" \
  -o "$tmp/node-problem-detector" ./cmd/nodeproblemdetector)
mv "$tmp/node-problem-detector" "$bin"
echo "  built node-problem-detector in $(( $(date +%s) - start ))s" >&2
echo "$bin"
