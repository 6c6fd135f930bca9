#!/usr/bin/env bash
# shellcheck disable=SC2016,SC2317 # bash -c scripts in single quotes; cleanup runs from the trap
# Runs `make test` (or other make targets) on a fresh Debian 12 with only Go
# and make added, the way a user would after cloning: the project's own
# scripts/services.sh has to install PostgreSQL, Redis and a C compiler and
# start them. For checking changes to the set-up (issue 9); not part of CI.
#
#   sudo scripts/fresh-machine-check.sh [target...]       default: test
#   sudo scripts/fresh-machine-check.sh --cmd 'shell command'
#
# Needs root, debootstrap, socat and iproute2 on a Debian/Ubuntu host.
# FRESH_ROOT (default /work/fresh-debian) is the Debian root: made with
# `debootstrap --variant=minbase bookworm` when missing, reused otherwise
# (FRESH_RESET=1 makes it anew, so that the installation runs again).
#
# - $FRESH_ROOT/root/newsfeed is a clean clone of this repository's HEAD
#   (commit first); /usr/local/go is copied in, and the module cache is filled
#   from the host for the project's own modules.
# - Everything runs in a network namespace of its own (ns nf-fresh): its
#   PostgreSQL and Redis listen on its own loopback and never meet the host's
#   on 5432 and 6379. The ways out are the registries a user's machine
#   reaches and nothing else: deb.debian.org:80 for apt, the Go module proxy
#   and checksum database (for the tools make builds, such as golangci-lint)
#   and the npm registry, each tunnelled through a unix socket to an address
#   of its own on the namespace's loopback (FRESH_OFFLINE=1: none at all).
# - /usr/sbin/policy-rc.d refuses to start services, as in Docker's Debian
#   images: packages install a PostgreSQL cluster that is down and
#   scripts/services.sh has to start it.
# - Mounts (/proc, /dev, /dev/pts, /dev/shm, /sys) live in a private mount
#   namespace and go with it; at the end the servers in the root are stopped,
#   the tunnel and the network namespace removed.
set -euo pipefail

[ "$(id -u)" = 0 ] || { echo "fresh-machine-check: run as root" >&2; exit 1; }
for c in debootstrap socat ip unshare chroot git; do
  command -v "$c" >/dev/null || { echo "fresh-machine-check: needs $c (apt-get install debootstrap socat iproute2)" >&2; exit 1; }
done

root=${FRESH_ROOT:-/work/fresh-debian}
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
ns=nf-fresh
mirror=deb.debian.org
# host:port pairs the fresh machine may reach, through the tunnel.
tunnels=("$mirror:80" proxy.golang.org:443 sum.golang.org:443 registry.npmjs.org:443)
hosts_mark="# fresh-machine-check tunnel"
if [ "${1:-}" = --cmd ]; then
  [ $# = 2 ] || { echo "usage: $0 [target...] | --cmd 'shell command'" >&2; exit 2; }
  what=$2 cmd=(bash -c "cd /root/newsfeed && $2")
else
  [ $# -gt 0 ] || set -- test
  what="make $*" cmd=(bash -c 'cd /root/newsfeed && time make "$@"' _ "$@")
fi
say() { echo "fresh-machine-check: $*"; }

# in_fresh CMD...: CMD as root in the fresh root, in its network namespace,
# with the environment of a fresh login (Go on PATH as go.dev/doc/install says).
in_fresh() {
  ip netns exec "$ns" unshare --mount --ipc --propagation private bash -c '
    r=$1; shift
    mount -t proc proc "$r/proc"
    mount --bind /dev "$r/dev"
    mount --bind /dev/pts "$r/dev/pts"
    mount -t tmpfs -o mode=1777 shm "$r/dev/shm"
    mount --bind /sys "$r/sys"
    exec chroot "$r" /usr/bin/env -i HOME=/root TERM="${TERM:-dumb}" \
      PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/go/bin "$@"' _ "$root" "$@"
}

pids=() socks=()
cleanup() {
  set +e
  if ip netns list | grep -qw "$ns"; then
    in_fresh bash -c '
      command -v pg_lsclusters >/dev/null && pg_lsclusters -h | while read -r v c _ s _; do
        [[ $s == online* ]] && pg_ctlcluster --skip-systemctl-redirect "$v" "$c" stop; done
      command -v redis-cli >/dev/null && redis-cli -h 127.0.0.1 -p 6379 shutdown nosave 2>/dev/null
      true'
  fi
  # Whatever else still runs in the fresh root (the Redis Cluster and the
  # replica that make test started, a test's child) outlives the namespace:
  # it goes too, so that the next check starts clean.
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/root" 2>/dev/null)" = "$(readlink -f "$root")" ] && kill -9 "${p#/proc/}" 2>/dev/null
  done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  ip netns del "$ns" 2>/dev/null
  [ -f "$root/etc/hosts" ] && sed -i "/$hosts_mark/d" "$root/etc/hosts"
  rm -f "${socks[@]}"
}
trap cleanup EXIT

# --- the root, Go, the code and its modules (host network) ------------------

if [ "${FRESH_RESET:-}" = 1 ]; then say "removing $root"; rm -rf "$root"; fi
if [ ! -f "$root/etc/debian_version" ]; then
  say "debootstrap --variant=minbase bookworm $root"
  mkdir -p "$root"
  debootstrap --variant=minbase bookworm "$root" "http://$mirror/debian" >/dev/null
fi
if ! cmp -s /usr/local/go/VERSION "$root/usr/local/go/VERSION"; then
  rm -rf "$root/usr/local/go"
  cp -a /usr/local/go "$root/usr/local/go"
fi
rm -rf "$root/root/newsfeed"
git clone -q "$repo" "$root/root/newsfeed"
say "code: $(git -C "$root/root/newsfeed" log --oneline -1)"
(cd "$root/root/newsfeed" && GOMODCACHE="$root/root/go/pkg/mod" GOFLAGS=-mod=mod go mod download)
# debootstrap leaves /etc/hosts empty; an installed system (or a container)
# has localhost in it, which PostgreSQL's listen_addresses names.
grep -qw localhost "$root/etc/hosts" 2>/dev/null ||
  printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >>"$root/etc/hosts"
# The host reaches the registries through this workplace's egress proxy,
# whose certificate authority it trusts; the fresh machine trusts it too, as
# a machine on such a network would (and keeps trusting it if a package
# brings ca-certificates and rebuilds the bundle).
mkdir -p "$root/usr/local/share/ca-certificates" "$root/etc/ssl/certs"
cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/" 2>/dev/null || true
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
printf '#!/bin/sh\n# fresh-machine-check: services are not started on installation (as in Docker images)\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 755 "$root/usr/sbin/policy-rc.d"

# --- the network namespace and the tunnels to the registries ---------------

ip netns del "$ns" 2>/dev/null || true
ip netns add "$ns"
ip -n "$ns" link set lo up
if [ "${FRESH_OFFLINE:-}" != 1 ]; then
  n=0
  for t in "${tunnels[@]}"; do
    host=${t%:*} port=${t##*:} addr=127.0.1.$((++n))
    sock=$(mktemp -u /tmp/fresh-machine-check.XXXXXX.sock)
    socks+=("$sock")
    socat "UNIX-LISTEN:$sock,fork,mode=600" "TCP:$t" & pids+=($!)
    ip netns exec "$ns" socat "TCP-LISTEN:$port,bind=$addr,reuseaddr,fork" "UNIX-CONNECT:$sock" & pids+=($!)
    echo "$addr $host $hosts_mark" >>"$root/etc/hosts"
    for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.1; done
  done
fi

if ! in_fresh sh -c 'command -v make' >/dev/null; then
  say "installing make (the one thing a user adds besides Go)"
  in_fresh sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq make >/dev/null'
fi

say "in the fresh root: $what"
rc=0
in_fresh "${cmd[@]}" || rc=$?
say "exit status $rc"
exit $rc
