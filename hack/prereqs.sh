#!/usr/bin/env bash
# Checks, before any long step, every program that 'make test' and
# 'make demo' need, and installs the missing ones with apt-get when run as
# root on Debian/Ubuntu. Usage: hack/prereqs.sh <test|demo|unit|kind>.
# PREREQS_CHECK_ONLY=1 only reports (exit 1 when something is missing).
set -euo pipefail
what=${1:-test}

# program:Debian package, per goal. The local cluster (demo, e2e, bench)
# needs root, a network namespace (ip, nsenter, unshare) and one DNAT rule
# (iptables); the manifest checks need promtool, the suite a Prometheus
# server (the same package) and kubectl.
common=(go:golang-go git:git)
cluster=(kubectl:kubectl iptables:iptables ip:iproute2 nsenter:util-linux unshare:util-linux openssl:openssl)
# kind (make e2e-kind, make kind-up): a Docker client (the engine must run
# already), and what the offline node image is built with: debootstrap for
# its root file system, gcc and the static libc for the pause binary, jq.
kind=(kubectl:kubectl docker:docker.io debootstrap:debootstrap gcc:gcc jq:jq prometheus:prometheus)
case "$what" in
  unit) want=("${common[@]}") ;;
  demo) want=("${common[@]}" "${cluster[@]}") ;;
  test) want=("${common[@]}" "${cluster[@]}" promtool:prometheus prometheus:prometheus) ;;
  kind) want=("${common[@]}" "${kind[@]}") ;;
  *) echo "prereqs: unknown goal '$what' (test, demo, unit or kind)" >&2; exit 2 ;;
esac

missing_cmds=() missing_pkgs=()
for pair in "${want[@]}"; do
  cmd=${pair%%:*} pkg=${pair#*:}
  if ! command -v "$cmd" >/dev/null 2>&1; then
    missing_cmds+=("$cmd")
    [[ " ${missing_pkgs[*]} " == *" $pkg "* ]] || missing_pkgs+=("$pkg")
  fi
done

if [ -z "${PREREQS_CHECK_ONLY:-}" ] && [ "$what" != unit ] && [ "$what" != kind ] && [ "$(id -u)" != 0 ]; then
  echo "prereqs: 'make $what' runs a local Kubernetes cluster in a network namespace of its own and needs root: run 'sudo make $what'." >&2
  exit 1
fi
if [ ${#missing_cmds[@]} -eq 0 ]; then
  echo "== prerequisites for make $what: all present"
  exit 0
fi
echo "== prerequisites for make $what: missing ${missing_cmds[*]} (Debian packages: ${missing_pkgs[*]})"
if [ -n "${PREREQS_CHECK_ONLY:-}" ]; then
  exit 1
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "prereqs: install them first, e.g. 'sudo apt-get install ${missing_pkgs[*]}'." >&2
  exit 1
fi
if [[ " ${missing_pkgs[*]} " == *" golang-go "* ]]; then
  echo "prereqs: Go is missing; install Go $(sed -n 's/^go //p' "$(dirname "$0")/../go.mod") or newer (the Debian package may be older)." >&2
  exit 1
fi
echo "== apt-get install ${missing_pkgs[*]} (as root; takes a minute)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing_pkgs[@]}" >/dev/null
for cmd in "${missing_cmds[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || { echo "prereqs: '$cmd' is still missing after apt-get install" >&2; exit 1; }
done
echo "== prerequisites installed"
