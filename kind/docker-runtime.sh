#!/usr/bin/env bash
# Can this Docker engine run kind's --privileged node containers? Prints the
# runtime kind must use: nothing when Docker's default works, else
# "certready-runc".
#
# On a host whose capability bounding set lacks a capability (some VMs drop
# CAP_SYS_RESOURCE from pid 1), every --privileged container fails with
#   OCI runtime create failed: ... unable to apply caps: operation not permitted
# because Docker asks runc for every capability it knows. As root, this
# script then registers (once, additively: the default runtime is left as
# it is) the runtime "certready-runc" in /etc/docker/daemon.json: runc behind
# e2e/cmd/runc-capfilter, which drops from each container's request only the
# capabilities the host itself cannot grant, and reloads dockerd (SIGHUP;
# running containers are not touched). kind/kind-up.sh then gives kind a
# docker that passes --runtime=certready-runc to the containers it creates.
#   kind/docker-runtime.sh            probe, install if needed, print the runtime
#   kind/docker-runtime.sh uninstall  remove the runtime from daemon.json (dockerd
#                                     forgets it at its next restart)
set -euo pipefail
cd "$(dirname "$0")/.."
name=certready-runc
filter=/usr/local/libexec/certready/runc-capfilter
conf=/etc/docker/daemon.json
log() { echo "docker-runtime: $*" >&2; }

reload() {
  local pid
  pid=$(pidof dockerd) || { log "no dockerd process to reload; restart Docker to apply $conf"; exit 1; }
  kill -HUP "$pid"
  for _ in $(seq 50); do
    docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q "\"$name\"" && return 0
    sleep 0.2
  done
  log "dockerd did not pick up $conf after SIGHUP"; exit 1
}

edit_conf() { # jq program
  local tmp
  tmp=$(mktemp "$conf.XXXXXX")
  { [ -s "$conf" ] && cat "$conf" || echo '{}'; } | jq "$1" > "$tmp"
  chmod 0644 "$tmp"
  mv "$tmp" "$conf"
}

if [ "${1:-}" = uninstall ]; then
  [ -f "$conf" ] && jq -e ".runtimes[\"$name\"]" "$conf" >/dev/null 2>&1 || { log "$name is not registered"; exit 0; }
  edit_conf "del(.runtimes[\"$name\"]) | if .runtimes == {} then del(.runtimes) else . end"
  log "removed $name from $conf"
  # dockerd adds runtimes on SIGHUP but keeps removed ones until it
  # restarts: the filter stays in place for it until then.
  kill -HUP "$(pidof dockerd)" 2>/dev/null || true
  log "dockerd keeps offering $name until it restarts; then remove $filter"
  exit 0
fi

docker info >/dev/null 2>&1 || { log "no Docker engine answers ('docker info' failed)"; exit 1; }
# The probe image is the filter binary itself on scratch ("probe" exits 0):
# nothing to pull.
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
(cd e2e && CGO_ENABLED=0 go build -trimpath -o "$bin/runc-capfilter" ./cmd/runc-capfilter)
probe=certready/runc-capfilter-probe:$(sha256sum "$bin/runc-capfilter" | cut -c1-12)
if ! docker image inspect "$probe" >/dev/null 2>&1; then
  printf 'FROM scratch\nCOPY runc-capfilter /runc-capfilter\nENTRYPOINT ["/runc-capfilter"]\n' > "$bin/Dockerfile"
  docker build -q -t "$probe" "$bin" >/dev/null
fi
try() { docker run --rm --pull never --privileged "$@" "$probe" probe 2>&1; }
if out=$(try); then exit 0; fi
case "$out" in
  *"unable to apply caps"*) ;;
  *) log "a --privileged container fails here, for a reason this script does not know how to work around:"; echo "$out" >&2; exit 1 ;;
esac
if ! docker info --format '{{json .Runtimes}}' | grep -q "\"$name\""; then
  [ "$(id -u)" = 0 ] || { log "--privileged containers fail here (the host's capability bounding set is reduced: $(grep CapBnd /proc/1/status)); run as root once to register the $name runtime"; exit 1; }
  log "--privileged containers fail here (pid 1 $(grep CapBnd /proc/1/status | tr -s '\t' ' ')): registering the Docker runtime $name ($filter) in $conf and reloading dockerd"
  install -D -m 0755 "$bin/runc-capfilter" "$filter"
  edit_conf ".runtimes[\"$name\"] = {\"path\": \"$filter\"}"
  reload
elif [ "$(id -u)" = 0 ] && ! cmp -s "$bin/runc-capfilter" "$filter"; then
  install -D -m 0755 "$bin/runc-capfilter" "$filter"
fi
if ! out=$(try --runtime "$name"); then
  log "even with the $name runtime a --privileged container fails:"; echo "$out" >&2; exit 1
fi
echo "$name"
