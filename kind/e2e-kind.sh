#!/usr/bin/env bash
# Runs the e2e suite against a fresh kind cluster: the same scenarios as
# 'make e2e', through e2e/provider's Kind (node files and processes are
# reached with kind's node API, i.e. docker exec). Needs Docker; kind and
# (when kind's pinned node image is not here) the node image are built
# offline by kind/env.sh and kind/node-image.sh. KEEP=1 keeps the cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
for t in docker kubectl go; do
  command -v "$t" >/dev/null || { echo "e2e-kind: '$t' is not installed; kind needs a Docker engine (use 'make e2e' for the Docker-free local cluster)." >&2; exit 1; }
done
docker info >/dev/null 2>&1 || { echo "e2e-kind: no Docker engine answers ('docker info' failed)." >&2; exit 1; }
t0=$(date +%s)
source kind/env.sh
export KIND_CLUSTER_NAME=${KIND_CLUSTER_NAME:-certready-e2e}
# Fresh: the first scenario checks the workers before certready is deployed.
kind delete cluster --name "$KIND_CLUSTER_NAME" >/dev/null 2>&1 || true
trap '[ -n "${KEEP:-}" ] || kind delete cluster --name "$KIND_CLUSTER_NAME"' EXIT
KIND_DEPLOY=0 kind/kind-up.sh
# node-problem-detector's image for the npd scenario, built offline and
# loaded like certready's; the suite skips that scenario without it.
npd_bin=$(e2e/hack/build-npd.sh)
npd_image=$(kind/npd-image.sh "$npd_bin")
kind load docker-image "$npd_image" --name "$KIND_CLUSTER_NAME"
export CERTREADY_NPD_BIN=$npd_bin
# The preflight scenario runs the host's certready against the cluster.
make --no-print-directory build
export CERTREADY_BIN=$PWD/bin/certready
echo "== e2e-kind: cluster ready after $(( $(date +%s) - t0 ))s; running the suite"
cd e2e
mkdir -p bin
s0=$(date +%s)
set +e
CERTREADY_E2E_PROVIDER=kind CERTREADY_KIND_CLUSTER="$KIND_CLUSTER_NAME" go test -count=1 -timeout 60m -v ./suite/ 2>&1 | tee bin/e2e-kind.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|\s+[a-z_]+\.go:[0-9]+:)'
rc=${PIPESTATUS[0]}
set -e
result=passed; [ "$rc" = 0 ] || result="FAILED (exit $rc; e2e/bin/e2e-kind.log)"
echo "== e2e-kind: suite $result in $(( $(date +%s) - s0 ))s; total $(( $(date +%s) - t0 ))s"
exit "$rc"
