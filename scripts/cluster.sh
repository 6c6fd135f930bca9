#!/usr/bin/env bash
# A local Redis Cluster and a PostgreSQL streaming replica, for running the
# product and its tests "past one machine" on one machine (issue 11):
#
#   scripts/cluster.sh up [--apply-delay DURATION]   # make cluster-up [APPLY_DELAY=2s]
#   scripts/cluster.sh down                          # make cluster-down
#   scripts/cluster.sh status                        # exit status 0 when all is healthy
#   eval "$(scripts/cluster.sh env)"                 # point the product and tests at it
#
# Redis Cluster: 6 redis-server processes (--cluster-enabled yes) on
# 127.0.0.1:7000–7005, 3 primaries and 3 replicas, created with
# `redis-cli --cluster create … --cluster-replicas 1`. The cluster bus uses
# ports 17000–17005. --cluster-node-timeout 2000: a primary that dies is
# replaced by its replica within a few seconds. No persistence (--save ""
# --appendonly no): a node that restarts comes back empty and takes its data
# from its primary (--repl-diskless-sync-delay 0: at once).
#
# PostgreSQL: a hot-standby streaming replica of the server on 127.0.0.1:5432
# on 127.0.0.1:5433, made with `pg_basebackup -R -X stream` and run with the
# server's own pg_ctl as the postgres user. No replication slot: a replica that
# stopped is made again from a fresh base backup rather than restarted.
# --apply-delay sets recovery_min_apply_delay (e.g. 2s), to test against a
# lagging replica (--apply-delay 0 sets it back); `up` without it leaves the
# delay as it is, so that restarting a killed Redis node does not take the lag
# away from a test that runs against it (a new replica starts at 0). The primary needs
# wal_level replica (the default) and max_wal_senders > 0 (the default 10); a
# `host replication all 127.0.0.1/32 trust` line is put first in its pg_hba.conf
# (and the configuration reloaded, never restarted) when replication
# connections are refused and this runs as root; `down` takes it out again
# (the line and the comment above it that says this script added it) and
# reloads.
#
# `up` is idempotent: what already runs and is healthy is left alone; a node
# that died (a failover test's kill -9) is restarted with its nodes.conf and
# rejoins as a replica (after its replica took over, so that an empty node
# never comes back as the owner of its slots); `up` returns once the cluster
# says cluster_state:ok with every slot covered, 3 primaries each with a
# connected replica, and the PostgreSQL replica streams. It prints how long
# it took. `down` stops everything it started and removes the state directory,
# the pg_hba.conf line it added, and the lock files: its own ($dir.lock) and
# the one the cluster tests take (testenv.HoldReplicas,
# ${TMPDIR:-/tmp}/newsfeed-test-replicas.lock; left while a test holds it).
# Running it twice, or on a machine where nothing is up, does nothing more.
#
# State (data, logs, nodes.conf, the replica's data directory) lives in
# NEWSFEED_CLUSTER_DIR, default /tmp/newsfeed-cluster: one cluster per
# machine, shared by every checkout, as the ports are. Logs:
#   $NEWSFEED_CLUSTER_DIR/redis/700N/redis.log
#   $NEWSFEED_CLUSTER_DIR/pg/postgresql.log
# Concurrent runs are serialized by a lock file beside it ($dir.lock).
set -euo pipefail

state=$(realpath -m "${NEWSFEED_CLUSTER_DIR:-/tmp/newsfeed-cluster}")
marker=$state/.newsfeed-cluster
rdir=$state/redis
pgroot=$state/pg
pgdata=$pgroot/data
pglog=$pgroot/postgresql.log

ports=(7000 7001 7002 7003 7004 7005)
node_timeout=2000
# The primary is the PostgreSQL the tests use: the port of
# NEWSFEED_TEST_DATABASE_URL when it names one (scripts/services.sh asks for
# it when the local cluster is not on 5432), else 5432.
primary_host=127.0.0.1 primary_port=5432
if [[ ${NEWSFEED_TEST_DATABASE_URL:-} =~ ^postgres(ql)?://[^/]*@(127\.0\.0\.1|localhost):([0-9]+)(/|\?|$) ]]; then
  primary_port=${BASH_REMATCH[3]}
fi
replica_port=5433
[ "$primary_port" != "$replica_port" ] ||
  { echo "cluster: the tests' PostgreSQL is on $replica_port, the port this script gives its replica; move one of them" >&2; exit 1; }
replica_name=newsfeed_replica # its cluster_name: application_name in pg_stat_replication
# The replica's replication slot on the primary: the primary keeps the WAL
# the replica has not received yet (without it, a checkpoint between the base
# backup and the replica's first connection, on a primary that writes a lot,
# removed a segment the replica then asked for, and it never streamed).
# `down` drops it, so that a replica gone for good holds no WAL back.
slot_name=newsfeed_replica
drop_slot() {
  primary -c "select pg_drop_replication_slot('$slot_name') from pg_replication_slots where slot_name = '$slot_name' and not active" >/dev/null 2>&1 || true
}
# The line `up` may put first in the primary's pg_hba.conf, under a comment
# that says so (which `down` looks for), and where it records the file's path
# (for a `down` while the primary does not answer).
hba_comment='# added by newsfeed scripts/cluster.sh: the local streaming replica on port 5433'
hba_line='host replication all 127.0.0.1/32 trust'
hba_record=$state/pg-hba-edited
# The lock file of the tests that stop or wait for replicas (testenv.HoldReplicas).
test_lock=${TMPDIR:-/tmp}/newsfeed-test-replicas.lock

say() { echo "cluster: $*"; }
warn() { echo "cluster: warning: $*" >&2; }
die() { echo "cluster: $*" >&2; exit 1; }
as_root() { [ "$(id -u)" = 0 ]; }
# log_tail FILE: the end of a log, indented, for a failure message.
log_tail() {
  if [ -s "$1" ]; then
    echo "  the end of $1:"
    tail -n "${2:-10}" "$1" | sed 's/^/  | /'
  else
    echo "  ($1 is empty or missing)"
  fi
}
die_log() { { echo "cluster: $1"; log_tail "$2" "${3:-10}"; } >&2; exit 1; }

usage() {
  echo "usage: $0 up [--apply-delay DURATION] | down | status | env" >&2
  exit 2
}

# ---------------------------------------------------------------- Redis ----

rcli() { local p=$1; shift; timeout 5 redis-cli -h 127.0.0.1 -p "$p" "$@" 2>/dev/null | tr -d '\r'; }  # a stopped node must not hang us
node_answers() { [ "$(rcli "$1" ping)" = PONG ]; }
# cinfo PORT FIELD: one field of CLUSTER INFO.
cinfo() { rcli "$1" cluster info | awk -F: -v k="$2" '$1 == k { print $2 }'; }
# rinfo PORT FIELD: one field of INFO.
rinfo() { rcli "$1" info | awk -F: -v k="$2" '$1 == k { print $2 }'; }
node_dir() { echo "$rdir/$1"; }
node_log() { echo "$rdir/$1/redis.log"; }
node_conf() { echo "$rdir/$1/nodes-$1.conf"; }
# node_ours PORT: the Redis answering on PORT is a cluster node of this
# state directory (not someone else's Redis on the port).
node_ours() {
  [ "$(rinfo "$1" cluster_enabled)" = 1 ] &&
    [ "$(rcli "$1" config get dir | sed -n 2p)" = "$(node_dir "$1")" ]
}
node_pid() {
  local f=$rdir/$1/redis.pid pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  [ -n "$pid" ] && [ -d "/proc/$pid" ] && grep -qa redis-server "/proc/$pid/cmdline" && echo "$pid"
}
# any_live_port: the first node that answers.
any_live_port() {
  local p
  for p in "${ports[@]}"; do node_answers "$p" && { echo "$p"; return 0; }; done
  return 1
}
# conf_self PORT: the "myself" line of a node's nodes.conf (id addr flags master …slots).
conf_self() { [ -f "$(node_conf "$1")" ] && awk '$3 ~ /myself/ { print; exit }' "$(node_conf "$1")"; }

start_node() {
  local p=$1 dir
  dir=$(node_dir "$p")
  mkdir -p "$dir"
  redis-server --cluster-enabled yes --port "$p" --bind 127.0.0.1 --daemonize yes \
    --save "" --appendonly no --cluster-node-timeout "$node_timeout" --repl-diskless-sync-delay 0 \
    --hash-max-listpack-entries 1024 \
    --cluster-config-file "nodes-$p.conf" --dir "$dir" \
    --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" >/dev/null 9>&- ||
    die_log "redis-server for 127.0.0.1:$p did not start" "$(node_log "$p")"
}
wait_node() {
  local p=$1
  for _ in $(seq 50); do node_answers "$p" && return 0; sleep 0.1; done
  die_log "Redis node 127.0.0.1:$p does not answer after it was started" "$(node_log "$p")"
}

# wait_failover PORT: PORT's node is dead and was a primary with slots; when a
# live replica of it can take over, wait until one did, so that the node
# restarts as a replica rather than as the (now empty) owner of its slots.
wait_failover() {
  local p=$1 id live view replicas
  id=$(conf_self "$p" | awk '{ print $1 }')
  [ -n "$id" ] || return 0
  live=$(any_live_port) || return 0
  view=$(rcli "$live" cluster nodes)
  # Still the owner of slots in the live nodes' view?
  echo "$view" | awk -v id="$id" '$1 == id && $3 ~ /master/ && NF > 8 { f = 1 } END { exit !f }' || return 0
  # A replica of it that is alive (its port answers) and not failed?
  replicas=$(echo "$view" | awk -v id="$id" '$4 == id && $3 !~ /fail/ { split($2, a, "[:@]"); print a[2] }')
  local r alive=no
  for r in $replicas; do node_answers "$r" && alive=yes; done
  [ "$alive" = yes ] || { warn "127.0.0.1:$p was a primary with no live replica; it restarts empty as the owner of its slots"; return 0; }
  say "127.0.0.1:$p (a primary) is down: waiting for its replica to take over before restarting it"
  for _ in $(seq 150); do
    view=$(rcli "$live" cluster nodes)
    echo "$view" | awk -v id="$id" '$1 == id && $3 ~ /master/ && NF > 8 { f = 1 } END { exit !f }' || return 0
    sleep 0.2
  done
  warn "no failover of 127.0.0.1:$p within 30 s; restarting it anyway (its slots come back empty)"
}

# cluster_healthy: every node answers and says cluster_state:ok with all 16384
# slots ok and 6 known nodes, no node's view has a failed node, there are 3
# primaries with slots and 3 replicas, and every replica's link is up and
# synced. On failure, $unhealthy says why.
unhealthy=
cluster_healthy() {
  local p view masters slaves
  for p in "${ports[@]}"; do
    node_answers "$p" || { unhealthy="127.0.0.1:$p does not answer"; return 1; }
  done
  for p in "${ports[@]}"; do
    local info
    info=$(rcli "$p" cluster info)
    [[ $info == *cluster_state:ok* ]] || { unhealthy="127.0.0.1:$p: cluster_state is not ok"; return 1; }
    [[ $info == *cluster_slots_ok:16384* ]] || { unhealthy="127.0.0.1:$p: not all 16384 slots are ok"; return 1; }
    [[ $info == *cluster_known_nodes:6* ]] || { unhealthy="127.0.0.1:$p does not know exactly 6 nodes"; return 1; }
    view=$(rcli "$p" cluster nodes)
    if echo "$view" | awk '$3 ~ /fail/ { f = 1 } END { exit !f }'; then
      unhealthy="127.0.0.1:$p still sees a failed node"; return 1
    fi
    if [ "$(rinfo "$p" role)" = slave ]; then
      { [ "$(rinfo "$p" master_link_status)" = up ] && [ "$(rinfo "$p" master_sync_in_progress)" = 0 ]; } ||
        { unhealthy="replica 127.0.0.1:$p is not yet connected to its primary"; return 1; }
    fi
  done
  masters=$(echo "$view" | awk '$3 ~ /master/ && NF > 8' | wc -l)
  slaves=$(echo "$view" | awk '$3 ~ /slave/' | wc -l)
  { [ "$masters" = 3 ] && [ "$slaves" = 3 ]; } ||
    { unhealthy="$masters primaries with slots and $slaves replicas, not 3 and 3"; return 1; }
  # Every primary has a replica.
  local id
  for id in $(echo "$view" | awk '$3 ~ /master/ && NF > 8 { print $1 }'); do
    echo "$view" | awk -v id="$id" '$4 == id { f = 1 } END { exit !f }' ||
      { unhealthy="primary $id has no replica"; return 1; }
  done
  unhealthy=
}

wait_cluster_healthy() {
  for _ in $(seq 300); do cluster_healthy && return 0; sleep 0.2; done
  {
    echo "cluster: the Redis Cluster is not healthy after 60 s: $unhealthy"
    p=${unhealthy#127.0.0.1:}; p=${p#replica 127.0.0.1:}; p=${p%%[!0-9]*}
    if [ -n "$p" ] && [ -f "$(node_log "$p")" ]; then log_tail "$(node_log "$p")"; fi
    echo "  every node's log: $rdir/700N/redis.log; \`scripts/cluster.sh status\` shows the roles;"
    echo "  \`make cluster-down && make cluster-up\` starts over"
  } >&2
  exit 1
}

redis_up() {
  { command -v redis-server >/dev/null && command -v redis-cli >/dev/null; } ||
    die "redis-server and redis-cli are not installed (apt-get install redis-server, or make services)"
  if cluster_healthy; then
    say "Redis Cluster 127.0.0.1:7000–7005 already up"
    return 0
  fi
  mkdir -p "$rdir"

  # Foreign servers on our ports stop us before anything changes.
  local p dead=()
  for p in "${ports[@]}"; do
    if node_answers "$p"; then
      node_ours "$p" || die "127.0.0.1:$p answers but is not a node of this cluster (cluster_enabled $(rinfo "$p" cluster_enabled), dir $(rcli "$p" config get dir | sed -n 2p), not $(node_dir "$p")); stop it, or set NEWSFEED_CLUSTER_DIR to its state directory"
    else
      dead+=("$p")
    fi
  done

  # Restart dead nodes: those that were primaries only after their replica
  # took over. Primaries first, so that replicas find them.
  if [ ${#dead[@]} -gt 0 ]; then
    local first=() later=()
    for p in "${dead[@]}"; do
      if conf_self "$p" | awk '$3 ~ /master/ && NF > 8 { f = 1 } END { exit !f }'; then
        first+=("$p")
      else
        later+=("$p")
      fi
    done
    for p in ${first[@]+"${first[@]}"}; do wait_failover "$p"; done
    for p in ${first[@]+"${first[@]}"} ${later[@]+"${later[@]}"}; do
      if [ -f "$(node_conf "$p")" ]; then say "restarting Redis node 127.0.0.1:$p (with its nodes.conf)"; else say "starting Redis node 127.0.0.1:$p"; fi
      start_node "$p"
    done
    for p in "${dead[@]}"; do wait_node "$p"; done
  fi

  # Create the cluster when no node has joined one yet.
  local fresh=0 joined=0
  for p in "${ports[@]}"; do
    if [ "$(cinfo "$p" cluster_known_nodes)" = 1 ] && [ "$(cinfo "$p" cluster_slots_assigned)" = 0 ]; then
      fresh=$((fresh + 1))
    else
      joined=$((joined + 1))
    fi
  done
  if [ "$fresh" = 6 ]; then
    say "creating the Redis Cluster (3 primaries, 3 replicas)"
    local addrs=()
    for p in "${ports[@]}"; do addrs+=("127.0.0.1:$p"); done
    redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >"$rdir/create.log" 2>&1 ||
      die_log "redis-cli --cluster create failed" "$rdir/create.log" 20
  elif [ "$fresh" -gt 0 ]; then
    die "$fresh of the 6 Redis nodes are empty, fresh nodes while $joined belong to a cluster (a nodes-700N.conf under $rdir was removed?); start over with: make cluster-down && make cluster-up"
  fi
  wait_cluster_healthy
  say "Redis Cluster 127.0.0.1:7000–7005 up"
}

redis_down() {
  local p pid
  for p in "${ports[@]}"; do
    if node_answers "$p"; then
      if node_ours "$p"; then
        rcli "$p" shutdown nosave >/dev/null || true
      else
        warn "127.0.0.1:$p answers but is not a node of this cluster: left alone"
        continue
      fi
    fi
    pid=$(node_pid "$p") || pid=
    if [ -n "$pid" ]; then
      for _ in $(seq 50); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
      if [ -d "/proc/$pid" ]; then
        warn "Redis node 127.0.0.1:$p (pid $pid) did not shut down; killing it"
        kill -9 "$pid" 2>/dev/null || true
      fi
    fi
  done
  for p in "${ports[@]}"; do
    for _ in $(seq 50); do node_answers "$p" || break; sleep 0.1; done
  done
}

redis_status() {
  local p live view ok=0
  if cluster_healthy; then
    echo "Redis Cluster: healthy (cluster_state ok, 16384 slots, 3 primaries, 3 replicas)"
  else
    echo "Redis Cluster: NOT healthy: $unhealthy"
    ok=1
  fi
  live=$(any_live_port) || { echo "  no node answers (state directory $rdir)"; return 1; }
  view=$(rcli "$live" cluster nodes)
  for p in "${ports[@]}"; do
    if ! node_answers "$p"; then
      printf '  127.0.0.1:%s  down            log %s\n' "$p" "$(node_log "$p")"
      continue
    fi
    local line role
    line=$(echo "$view" | awk -v a="127.0.0.1:$p@" 'index($2, a) == 1 { print; exit }')
    role=$(rinfo "$p" role)
    if [ "$role" = master ]; then
      printf '  127.0.0.1:%s  primary         slots %s  pid %s\n' "$p" \
        "$(echo "$line" | awk '{ s = ""; for (i = 9; i <= NF; i++) s = s (s ? " " : "") $i; print (s ? s : "none") }')" \
        "$(rinfo "$p" process_id)"
    else
      printf '  127.0.0.1:%s  replica of %s  link %s  pid %s\n' "$p" \
        "$(rinfo "$p" master_port)" "$(rinfo "$p" master_link_status)" "$(rinfo "$p" process_id)"
    fi
  done
  return $ok
}

# ----------------------------------------------------------- PostgreSQL ----

pq() { PGCONNECT_TIMEOUT=3 psql -X -w -q -At -h 127.0.0.1 -U postgres "$@"; }
primary() { pq -p "$primary_port" -d postgres "$@"; }
replica() { pq -p "$replica_port" -d postgres "$@"; }
# as_pg CMD…: run as the postgres OS user when root (pg_ctl refuses root).
as_pg() { if as_root; then runuser -u postgres -- "$@"; else "$@"; fi; }

# find_pg_bin: pg_bin, the binaries of the primary's major version (of the
# replica's data directory when the primary does not answer).
pg_bin=
find_pg_bin() {
  local num major
  if num=$(primary -c 'show server_version_num' 2>/dev/null); then
    major=$((num / 10000))
  elif [ -f "$pgdata/PG_VERSION" ]; then
    major=$(cat "$pgdata/PG_VERSION")
  else
    die "PostgreSQL does not answer on $primary_host:$primary_port (make services starts it)"
  fi
  pg_bin=/usr/lib/postgresql/$major/bin
  { [ -x "$pg_bin/pg_ctl" ] && [ -x "$pg_bin/pg_basebackup" ]; } ||
    die "PostgreSQL $major: $pg_bin/pg_ctl or pg_basebackup is missing"
}

replica_running() { [ -f "$pgdata/PG_VERSION" ] && as_pg "$pg_bin/pg_ctl" -D "$pgdata" status >/dev/null 2>&1; }
streaming() {
  [ "$(primary -c "select state from pg_stat_replication where application_name = '$replica_name'" 2>/dev/null)" = streaming ] &&
    [ "$(replica -c 'select pg_is_in_recovery()' 2>/dev/null)" = t ]
}
wait_streaming() {
  for _ in $(seq "$(($1 * 5))"); do streaming && return 0; sleep 0.2; done
  return 1
}

# The primary must accept replication connections from 127.0.0.1.
check_primary() {
  local level senders hba out
  level=$(primary -c 'show wal_level')
  senders=$(primary -c 'show max_wal_senders')
  { [ "$level" != minimal ] && [ "$senders" -gt 0 ]; } ||
    die "the primary on $primary_port has wal_level=$level and max_wal_senders=$senders; a replica needs wal_level=replica and max_wal_senders > 0 (both need a restart of the primary, which this script does not do)"
  replication_ok() { out=$(PGCONNECT_TIMEOUT=3 psql -X -w -At "host=127.0.0.1 port=$primary_port user=postgres dbname=postgres replication=true" -c IDENTIFY_SYSTEM 2>&1); }
  replication_ok && return 0
  hba=$(primary -c 'show hba_file')
  # Refused for want of a line (no entry), or by Debian's default line that
  # asks a password (scram-sha-256): pg_hba.conf takes the first line that
  # matches, so ours goes first.
  if [[ $out == *"no pg_hba.conf entry"* || $out == *password* ]] && as_root && [ -w "$hba" ]; then
    say "allowing local replication connections: putting 'host replication all 127.0.0.1/32 trust' first in $hba and reloading"
    sed -i "1i $hba_comment\\n$hba_line" "$hba"
    echo "$hba" >"$hba_record"
    primary -c 'select pg_reload_conf()' >/dev/null
    for _ in $(seq 10); do replication_ok && return 0; sleep 0.2; done
  fi
  die "the primary on $primary_port refuses a replication connection from 127.0.0.1 as postgres:
  $out
  its pg_hba.conf ($hba) needs a line like 'host replication all 127.0.0.1/32 trust' (then: psql -c 'select pg_reload_conf()')"
}

# set_apply_delay: recovery_min_apply_delay of the running replica as asked
# (postgresql.conf, reloaded: no restart).
set_apply_delay() {
  [ -n "$apply_delay" ] || return 0 # not asked: left as it is
  local line="recovery_min_apply_delay = '$apply_delay'"
  grep -qxF "$line" "$pgdata/postgresql.conf" && return 0
  sed -i "s/^recovery_min_apply_delay = .*/$line/" "$pgdata/postgresql.conf"
  replica -c 'select pg_reload_conf()' >/dev/null
  sleep 0.5
  say "replica's recovery_min_apply_delay now $(replica -c 'show recovery_min_apply_delay')"
}

make_replica() {
  local ts settings
  ts=$(primary -c "select string_agg(spcname, ', ') from pg_tablespace where spcname not in ('pg_default', 'pg_global')")
  [ -z "$ts" ] || die "the primary has tablespaces ($ts) whose paths a local replica would share; not supported"
  rm -rf "$pgroot"
  mkdir -p "$pgroot"
  as_root && chown postgres:postgres "$pgroot"
  chmod 0700 "$pgroot"
  as_pg mkdir -m 0700 "$pgdata"
  say "making the PostgreSQL replica: pg_basebackup from $primary_host:$primary_port into $pgdata"
  drop_slot # a slot left by a replica made before
  as_pg "$pg_bin/pg_basebackup" -h "$primary_host" -p "$primary_port" -U postgres -w -D "$pgdata" \
    -R -X stream -C -S "$slot_name" --checkpoint=fast >"$pgroot/basebackup.log" 2>&1 ||
    die_log "pg_basebackup failed" "$pgroot/basebackup.log"
  # Debian keeps the server's configuration in /etc, outside the data
  # directory, so the copy has none: the replica gets its own. Hot standby
  # needs these settings at least as large as the primary's.
  settings=$(primary -F ' ' -c "select name, setting from pg_settings where name in ('max_connections', 'max_worker_processes', 'max_wal_senders', 'max_prepared_transactions', 'max_locks_per_transaction', 'TimeZone', 'DateStyle', 'lc_messages', 'lc_monetary', 'lc_numeric', 'lc_time', 'default_text_search_config') order by name")
  {
    echo "# written by newsfeed scripts/cluster.sh: a streaming replica of $primary_host:$primary_port"
    echo "port = $replica_port"
    echo "listen_addresses = '127.0.0.1'"
    echo "unix_socket_directories = '$pgroot'"
    echo "cluster_name = '$replica_name'"
    echo "hot_standby = on"
    echo "hot_standby_feedback = on"
    echo "logging_collector = off"
    echo "# scripts/cluster.sh up --apply-delay 2s sets it; up without it leaves it"
    echo "recovery_min_apply_delay = '${apply_delay:-0}'"
    echo "$settings" | while read -r name value; do
      [ -n "$name" ] && echo "$name = '$value'"
    done
  } >"$pgdata/postgresql.conf"
  printf '%s\n' 'local all all trust' 'host all all 127.0.0.1/32 trust' 'host all all ::1/128 trust' >"$pgdata/pg_hba.conf"
  : >"$pgdata/pg_ident.conf"
  as_root && chown postgres:postgres "$pgdata/postgresql.conf" "$pgdata/pg_hba.conf" "$pgdata/pg_ident.conf"
  as_pg "$pg_bin/pg_ctl" -D "$pgdata" -l "$pglog" -w -t 60 start >"$pgroot/pg_ctl.log" 2>&1 9>&- ||
    die_log "the PostgreSQL replica did not start (pg_ctl: $(tail -n 1 "$pgroot/pg_ctl.log"))" "$pglog"
}

pg_up() {
  find_pg_bin
  # Someone else's server on the replica's port?
  local dir
  if dir=$(replica -c 'show data_directory' 2>/dev/null) && [ "$dir" != "$pgdata" ]; then
    die "127.0.0.1:$replica_port is taken by a PostgreSQL with data directory $dir, not this replica's $pgdata"
  fi
  [ -n "$(primary -c 'select 1' 2>/dev/null)" ] ||
    die "PostgreSQL does not answer on $primary_host:$primary_port (make services starts it)"
  if replica_running; then
    if streaming || { say "the PostgreSQL replica runs but does not stream yet: waiting"; wait_streaming 20; }; then
      set_apply_delay
      say "PostgreSQL replica 127.0.0.1:$replica_port already streaming"
      return 0
    fi
    warn "the PostgreSQL replica does not stream after 20 s; making it again"
    log_tail "$pglog" 5 >&2
    as_pg "$pg_bin/pg_ctl" -D "$pgdata" stop -m fast -w >/dev/null 2>&1 || true
  fi
  check_primary
  make_replica
  wait_streaming 30 || {
    echo "cluster: the PostgreSQL replica on $replica_port started but does not stream from $primary_port after 30 s" >&2
    log_tail "$pglog" >&2
    exit 1
  }
  say "PostgreSQL replica 127.0.0.1:$replica_port streaming from $primary_host:$primary_port (recovery_min_apply_delay $(replica -c 'show recovery_min_apply_delay'))"
}

pg_down() {
  [ -f "$pgdata/PG_VERSION" ] || return 0
  find_pg_bin
  if replica_running; then
    as_pg "$pg_bin/pg_ctl" -D "$pgdata" stop -m fast -w -t 60 >/dev/null 2>&1 ||
      die_log "the PostgreSQL replica in $pgdata did not stop" "$pglog"
  fi
  drop_slot
}

# hba_restore: take out of the primary's pg_hba.conf the replication line
# that check_primary put there (found by the comment above it: a line that
# someone else wrote is left alone), and reload the configuration.
hba_restore() {
  local hba
  hba=$(primary -c 'show hba_file' 2>/dev/null) || hba=
  [ -n "$hba" ] || { [ -f "$hba_record" ] && hba=$(cat "$hba_record"); } || true
  [ -n "$hba" ] && [ -f "$hba" ] || return 0
  grep -qxF "$hba_comment" "$hba" || return 0
  if ! { as_root && [ -w "$hba" ]; }; then
    warn "$hba still has the replication line this script added ('$hba_line' under '$hba_comment'): not root, so left there"
    return 0
  fi
  # The comment and, when it is ours, the line after it.
  sed -i "\\|^$hba_comment\$|{N; \\|\\n$hba_line\$|d}" "$hba"
  if grep -qxF "$hba_comment" "$hba"; then # not followed by our line: the comment alone
    sed -i "\\|^$hba_comment\$|d" "$hba"
  fi
  if [ -n "$(primary -c 'select pg_reload_conf()' 2>/dev/null)" ]; then
    say "took '$hba_line' out of $hba again and reloaded the primary's configuration"
  else
    say "took '$hba_line' out of $hba again (the primary does not answer: it reads the file when it starts)"
  fi
}

# test_lock_remove: remove the tests' lock file unless a test holds it
# (testenv.HoldReplicas opens it again when it was removed under it).
test_lock_remove() {
  [ -f "$test_lock" ] || return 0
  command -v flock >/dev/null || return 0
  if (flock -n 8 && rm -f "$test_lock") 8<"$test_lock" 2>/dev/null; then
    return 0
  fi
  warn "$test_lock is held by a running test: left"
}

pg_status() {
  if ! replica -c 'select 1' >/dev/null 2>&1; then
    echo "PostgreSQL replica: down (127.0.0.1:$replica_port does not answer; log $pglog)"
    return 1
  fi
  local row
  row=$(primary -F ' ' -c "select state, coalesce(extract(epoch from replay_lag)::numeric(10,3)::text, '0') from pg_stat_replication where application_name = '$replica_name'" 2>/dev/null || true)
  echo "PostgreSQL replica: 127.0.0.1:$replica_port, in recovery $(replica -c 'select pg_is_in_recovery()'), data $(replica -c 'show data_directory')"
  echo "  from $primary_host:$primary_port: ${row:-not connected} (state, replay lag in s); recovery_min_apply_delay $(replica -c 'show recovery_min_apply_delay')"
  [ "${row%% *}" = streaming ] && [ "$(replica -c 'select pg_is_in_recovery()')" = t ]
}

# ------------------------------------------------------------------ main ----

cluster_url() {
  local url="redis://127.0.0.1:${ports[0]}" sep='?' p
  for p in "${ports[@]:1}"; do url+="${sep}addr=127.0.0.1:$p"; sep='&'; done
  echo "$url"
}

# lock: serialize runs on $state.lock (fd 9). The servers started while it is
# held must not inherit fd 9 (9>&-), or they would hold the lock forever.
# `down` removes the file while it holds it: a run that waited on the removed
# file then holds a lock nobody else can see, so it opens the path again
# until the file it locked is the one there.
lock() {
  command -v flock >/dev/null || return 0
  local _
  for _ in $(seq 20); do
    exec 9>>"$state.lock"
    flock -w 300 9 || die "another scripts/cluster.sh holds $state.lock"
    [ "$(stat -c %d:%i "$state.lock" 2>/dev/null)" = "$(stat -L -c %d:%i /dev/fd/9)" ] && return 0
  done
  die "could not lock $state.lock: it keeps being removed"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
apply_delay= # empty: leave the replica's delay as it is (0 for a new replica)
case $cmd in
  up)
    while [ $# -gt 0 ]; do
      case $1 in
        --apply-delay) [ $# -ge 2 ] || usage; apply_delay=$2; shift 2 ;;
        --apply-delay=*) apply_delay=${1#*=}; shift ;;
        *) usage ;;
      esac
    done
    [[ -z $apply_delay || $apply_delay =~ ^[0-9]+(ms|s|min|h|d)?$ ]] || die "--apply-delay: $apply_delay is not a duration like 2s, 500ms or 0"
    start=$SECONDS
    mkdir -p "$state"
    chmod 0755 "$state" # the postgres user reaches the replica's directory through it
    lock
    touch "$marker"
    redis_up
    pg_up
    say "up in $((SECONDS - start)) s; eval \"\$(scripts/cluster.sh env)\" points the product and the tests at it"
    ;;
  down)
    [ $# -eq 0 ] || usage
    if [ -e "$state" ] && [ ! -e "$marker" ] && [ -n "$(ls -A "$state")" ]; then
      die "$state has no $(basename "$marker") marker: not removing a directory this script did not make"
    fi
    [ -d "$(dirname "$state")" ] && lock
    redis_down
    pg_down
    hba_restore
    rm -rf "$state"
    test_lock_remove
    rm -f "$state.lock" # last, while it is held (lock() sees it gone)
    say "down: Redis Cluster and PostgreSQL replica stopped, $state removed"
    ;;
  status)
    [ $# -eq 0 ] || usage
    rc=0
    redis_status || rc=1
    pg_status || rc=1
    exit $rc
    ;;
  env)
    [ $# -eq 0 ] || usage
    url=$(cluster_url)
    cat <<EOF
export NEWSFEED_REDIS_URL='$url'
export NEWSFEED_REDIS_CLUSTER=true
export NEWSFEED_DATABASE_READ_URL='postgres://postgres@127.0.0.1:$replica_port/newsfeed?sslmode=disable'
export NEWSFEED_TEST_REDIS_CLUSTER_URL='$url'
export NEWSFEED_TEST_REPLICA_URL='postgres://postgres@127.0.0.1:$replica_port/postgres?sslmode=disable'
EOF
    ;;
  *) usage ;;
esac
