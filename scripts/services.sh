#!/usr/bin/env bash
# Makes sure PostgreSQL and Redis run on this machine for `make run` and
# `make test`: installs what is missing with apt-get on Debian/Ubuntu when run
# as root (otherwise prints the exact command), starts the servers when they
# are down, and waits for them. Quiet when all is well; safe to run again.
#
#   scripts/services.sh [--tests] [--cc] [--browser] [--node] [--promtool] [--no-servers]
#
# --tests  the caller runs the tests, which read NEWSFEED_TEST_DATABASE_URL
#          (without it: `make run` and `make bench`, which read
#          NEWSFEED_DATABASE_URL or database.url in config.yaml)
# --cc     a C compiler is needed too (gcc and libc6-dev: `go test -race`
#          needs cgo); `make test` passes it, `make run` does not
# --browser  a headless browser is needed too (Debian's chromium, which the
#          browser tests in e2e/ drive); `make test` passes it
# --node   Node.js and npm are needed too (`make spec-lint` runs Redocly's
#          linter from npm): Debian's nodejs and npm
# --promtool  promtool is needed too (`make monitoring-check` and the test
#          that lints /metrics): Debian's prometheus package, installed for
#          its tools alone, its server neither started nor enabled
# --no-servers  install what the other flags name and stop: no PostgreSQL,
#          no Redis (`make spec-lint` and `make monitoring-check` alone)
#
# PostgreSQL is the Debian/Ubuntu cluster that pg_lsclusters lists (one on
# port 5432 first, else the newest version's "main"); with no cluster at all,
# one is created. When its port is not 5432, the port of the default
# database.url, the script says which URLs to set and stops unless they are set.
#
# SERVICES_INSTALL_ONLY=1 installs what is missing and starts nothing (for
# building an image or a chroot whose servers run later).
set -euo pipefail

need_tests=no need_cc=no need_browser=no need_node=no need_promtool=no servers=yes
for arg in "$@"; do
  case $arg in
    --tests) need_tests=yes ;;
    --cc) need_cc=yes ;;
    --browser) need_browser=yes ;;
    --node) need_node=yes ;;
    --promtool) need_promtool=yes ;;
    --no-servers) servers=no ;;
    *) echo "usage: $0 [--tests] [--cc] [--browser] [--node] [--promtool] [--no-servers]" >&2; exit 2 ;;
  esac
done

as_root() { [ "$(id -u)" = 0 ]; }
say() { echo "services: $*"; }
die() { echo "services: $*" >&2; exit 1; }

# --- what is missing ---------------------------------------------------------

cc=${CC:-gcc}
command -v go >/dev/null 2>&1 && cc=$(go env CC 2>/dev/null || echo "$cc")
cc=${cc%% *}
cc_works() {
  # Compiling and linking a C file needs the compiler, the C library's
  # headers and its startup files: what cgo and the race detector use.
  command -v "$cc" >/dev/null 2>&1 || return 1
  local tmp rc=0
  tmp=$(mktemp -d)
  printf '#include <stdlib.h>\nint main(void) { return EXIT_SUCCESS; }\n' >"$tmp/cc.c"
  "$cc" -o "$tmp/cc" "$tmp/cc.c" >/dev/null 2>&1 || rc=1
  rm -rf "$tmp"
  return $rc
}

# The browser tests find Chromium the same way (internal/browser): the path
# in NEWSFEED_TEST_CHROMIUM, else chromium or chromium-browser on PATH.
browser_installed() {
  if [ -n "${NEWSFEED_TEST_CHROMIUM:-}" ]; then
    [ -x "$NEWSFEED_TEST_CHROMIUM" ] || die "NEWSFEED_TEST_CHROMIUM=$NEWSFEED_TEST_CHROMIUM is not an executable file"
    return 0
  fi
  command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1
}

pg_server_installed() { compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null; }

missing=()
if [ "$servers" = yes ]; then
  { command -v pg_ctlcluster >/dev/null 2>&1 && pg_server_installed; } || missing+=(postgresql)
  { command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; } || missing+=(redis-server)
fi
if [ "$need_node" = yes ]; then
  command -v node >/dev/null 2>&1 || missing+=(nodejs)
  command -v npm >/dev/null 2>&1 || missing+=(npm)
fi
[ "$need_promtool" = yes ] && ! command -v promtool >/dev/null 2>&1 && missing+=(prometheus)
if [ "$need_cc" = yes ] && ! cc_works; then
  [ "$cc" = gcc ] || command -v "$cc" >/dev/null 2>&1 ||
    die "the C compiler Go uses for go test -race, $cc (go env CC), is not installed"
  missing+=(gcc libc6-dev)
fi
[ "$need_browser" = yes ] && ! browser_installed && missing+=(chromium)

installed_pg=no
if [ ${#missing[@]} -gt 0 ]; then
  if as_root && command -v apt-get >/dev/null 2>&1; then
    say "installing ${missing[*]} with apt-get"
    apt-get update -q
    # prometheus comes for promtool alone: its server must not start (it
    # would take :9090, metrics.addr's default). Where nothing says so yet,
    # policy-rc.d refuses every service start during the installation, as
    # in Docker's Debian images; the unit is disabled after it.
    policy=/usr/sbin/policy-rc.d own_policy=no
    if [[ " ${missing[*]} " == *" prometheus "* ]] && [ ! -e "$policy" ]; then
      printf '#!/bin/sh\n# added by newsfeed scripts/services.sh while it installs packages\nexit 101\n' >"$policy"
      chmod 755 "$policy"
      own_policy=yes
      trap 'rm -f "$policy"' EXIT
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
    if [ "$own_policy" = yes ]; then rm -f "$policy"; trap - EXIT; fi
    if [[ " ${missing[*]} " == *" prometheus "* ]] && command -v systemctl >/dev/null 2>&1; then
      systemctl disable prometheus >/dev/null 2>&1 || true
    fi
    [[ " ${missing[*]} " == *" postgresql "* ]] && installed_pg=yes
    if [ "$need_cc" = yes ] && ! cc_works; then
      die "$cc still cannot compile and link a C program; the race detector (make test) needs it"
    fi
    if [ "$need_browser" = yes ] && ! browser_installed; then
      die "chromium is installed but neither chromium nor chromium-browser is on PATH; set NEWSFEED_TEST_CHROMIUM to its path"
    fi
  else
    what=
    for p in "${missing[@]}"; do
      case $p in
        postgresql) what+=", PostgreSQL" ;;
        redis-server) what+=", Redis" ;;
        gcc) what+=", a C compiler (go test -race needs cgo)" ;;
        chromium) what+=", Chromium (the browser tests in e2e/ drive it headless)" ;;
        nodejs) what+=", Node.js (make spec-lint)" ;;
        npm) what+=", npm (make spec-lint)" ;;
        prometheus) what+=", promtool (Debian's prometheus package; make monitoring-check)" ;;
      esac
    done
    echo "services: missing ${what#, }; install with:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi

# --- the PostgreSQL cluster --------------------------------------------------

default_port=5432
pg_answers() { pg_isready -q -h 127.0.0.1 -p "$1"; }

# pick_cluster sets pg_version, pg_cluster, pg_port and pg_log from
# pg_lsclusters: the cluster on the default port, else the newest version's
# main, else the newest version's first; with no cluster, it creates main.
# The cluster gets the lines that let the default database.url (TCP as
# postgres, no password) in when this script installed or created it.
pick_cluster() {
  local clusters server created=no
  clusters=$(pg_lsclusters -h 2>/dev/null || true)
  if [ -z "$clusters" ]; then
    server=$(compgen -G '/usr/lib/postgresql/*/bin/postgres' | sort -V | tail -n 1)
    server=${server#/usr/lib/postgresql/}
    as_root || die "PostgreSQL ${server%%/*} has no cluster; create one with:
  sudo pg_createcluster ${server%%/*} main"
    say "creating PostgreSQL cluster ${server%%/*}/main"
    # UTF-8, as the packages' own cluster is: under the C locale (a bare
    # environment) initdb would pick SQL_ASCII, where lengths count bytes.
    local opts=()
    [ "$(locale charmap 2>/dev/null)" = UTF-8 ] || opts=(--locale C.UTF-8)
    pg_createcluster "${opts[@]}" "${server%%/*}" main >/dev/null
    created=yes
    clusters=$(pg_lsclusters -h)
  fi
  # Ver Cluster Port Status Owner Data-directory Log-file
  read -r pg_version pg_cluster pg_port _ _ _ pg_log < <(
    echo "$clusters" | awk -v p="$default_port" '$3 == p { print; f = 1; exit } END { exit !f }' ||
    echo "$clusters" | sort -k1,1Vr -k2,2 | awk '$2 == "main" { print; f = 1; exit } END { exit !f }' ||
    echo "$clusters" | sort -k1,1Vr | head -n 1)
  if [ "$installed_pg" = yes ] || [ "$created" = yes ]; then
    local hba=/etc/postgresql/$pg_version/$pg_cluster/pg_hba.conf
    if ! grep -q 'newsfeed scripts/services.sh' "$hba"; then
      sed -i '1i # added by newsfeed scripts/services.sh: local TCP connections are trusted\nhost all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
      hba_changed=yes
    fi
  fi
}

[ "$servers" = yes ] || exit 0

hba_changed=no pg_cluster=
[ "$installed_pg" = yes ] && pick_cluster

[ "${SERVICES_INSTALL_ONLY:-}" = 1 ] && { say "installed; starting nothing (SERVICES_INSTALL_ONLY=1)"; exit 0; }

# --- PostgreSQL --------------------------------------------------------------

if [ -n "$pg_cluster" ] || ! pg_answers "$default_port"; then
  [ -n "$pg_cluster" ] || pick_cluster
  name="PostgreSQL $pg_version/$pg_cluster"
  status=$(pg_lsclusters -h "$pg_version" "$pg_cluster" | awk '{ print $4 }')
  if [[ $status == online* ]]; then
    [ "$hba_changed" = yes ] && pg_ctlcluster --skip-systemctl-redirect "$pg_version" "$pg_cluster" reload
  elif as_root; then
    say "starting $name (port $pg_port)"
    # On failure pg_ctlcluster prints the log's end itself.
    pg_ctlcluster --skip-systemctl-redirect "$pg_version" "$pg_cluster" start ||
      die "$name did not start; its configuration is in /etc/postgresql/$pg_version/$pg_cluster/, its log $pg_log"
  else
    die "$name is down; start it with:
  sudo pg_ctlcluster --skip-systemctl-redirect $pg_version $pg_cluster start"
  fi
  for _ in $(seq 50); do pg_answers "$pg_port" && break; sleep 0.2; done
  if ! pg_answers "$pg_port"; then
    status=$(pg_lsclusters -h "$pg_version" "$pg_cluster" | awk '{ print $4 }')
    echo "services: $name (port $pg_port in pg_lsclusters, $status) does not answer on 127.0.0.1:$pg_port" >&2
    echo "  its listen_addresses and port are in /etc/postgresql/$pg_version/$pg_cluster/postgresql.conf; the end of $pg_log:" >&2
    tail -n 5 "$pg_log" 2>/dev/null | sed 's/^/  | /' >&2
    exit 1
  fi

  if [ "$pg_port" != "$default_port" ]; then
    # The URLs must name the cluster's port: the caller's variable, or for
    # make run a database.url in config.yaml, may already do so.
    if [ "$need_tests" = yes ]; then var=NEWSFEED_TEST_DATABASE_URL; else var=NEWSFEED_DATABASE_URL; fi
    url=${!var:-}
    if [ -z "$url" ] && [ "$need_tests" = no ] && [ -f config.yaml ]; then
      url=$(awk '/^database:/ { d = 1; next } /^[^ #]/ { d = 0 } d && $1 == "url:" { print $2; exit }' config.yaml)
    fi
    case $url in
      *":$pg_port/"* | *":$pg_port?"* | *":$pg_port") ;;
      *)
        msg="$name listens on port $pg_port, not on $default_port, the port of the default database.url"
        hint="
  export NEWSFEED_DATABASE_URL='postgres://postgres@127.0.0.1:$pg_port/newsfeed?sslmode=disable'       # make run, make bench
  export NEWSFEED_TEST_DATABASE_URL='postgres://postgres@127.0.0.1:$pg_port/postgres?sslmode=disable'  # make test, make model"
        [ -n "${!var:-}" ] || die "$msg; point the project at it with:$hint"
        echo "services: warning: $msg, and $var does not name that port; the URLs for this cluster:$hint" >&2
        ;;
    esac
  fi
fi

# --- Redis -------------------------------------------------------------------

redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; }
if ! redis_up; then
  redis_cmd=(redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no
             --hash-max-listpack-entries 1024 --dir /var/lib/redis --logfile /var/log/redis/ci.log)
  if as_root; then
    say "starting Redis"
    mkdir -p /var/lib/redis /var/log/redis
    "${redis_cmd[@]}"
  else
    die "Redis is down; start it with:
  sudo ${redis_cmd[*]}"
  fi
  for _ in $(seq 50); do redis_up && break; sleep 0.1; done
  redis_up || die "Redis did not come up; see /var/log/redis/ci.log"
fi
# What keeps a reader's following hash compact (newsfeed checks it at start
# and warns; see redis.configure): set on a Redis started before this script.
if [ "$(redis-cli -h 127.0.0.1 -p 6379 config get hash-max-listpack-entries 2>/dev/null | sed -n 2p)" != 1024 ]; then
  redis-cli -h 127.0.0.1 -p 6379 config set hash-max-listpack-entries 1024 >/dev/null 2>&1 ||
    say "could not raise hash-max-listpack-entries on Redis (newsfeed will warn at start)"
fi
say "PostgreSQL and Redis are up"
