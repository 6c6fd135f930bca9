#!/usr/bin/env bash
# Makes sure PostgreSQL and Redis run on this machine for `make run` and
# `make test`: starts them when they are installed but down, installs them
# with apt-get on Debian/Ubuntu when run as root, and otherwise prints the
# exact command to run.
set -euo pipefail

as_root() { [ "$(id -u)" = 0 ]; }

missing=()
command -v pg_ctlcluster >/dev/null 2>&1 || missing+=(postgresql)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
installed_pg=no
if [ ${#missing[@]} -gt 0 ]; then
  if as_root && command -v apt-get >/dev/null 2>&1; then
    echo "services: installing ${missing[*]} with apt-get"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
    [[ " ${missing[*]} " == *" postgresql "* ]] && installed_pg=yes
  else
    echo "services: PostgreSQL and Redis are needed; install them with:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi

pg_version=$(ls /etc/postgresql | sort -V | tail -n 1)
if [ "$installed_pg" = yes ]; then
  # A fresh install only trusts the postgres OS user; the default
  # database.url connects over TCP as postgres without a password.
  hba=/etc/postgresql/$pg_version/main/pg_hba.conf
  sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
fi

pg_up() { pg_isready -q -h 127.0.0.1 -p 5432; }
if ! pg_up; then
  if as_root; then
    echo "services: starting PostgreSQL $pg_version"
    pg_ctlcluster --skip-systemctl-redirect "$pg_version" main start || true
    [ "$installed_pg" = yes ] && pg_ctlcluster --skip-systemctl-redirect "$pg_version" main reload
  else
    echo "services: PostgreSQL is down; start it with:" >&2
    echo "  sudo pg_ctlcluster --skip-systemctl-redirect $pg_version main start" >&2
    exit 1
  fi
  for _ in $(seq 50); do pg_up && break; sleep 0.2; done
  pg_up || { echo "services: PostgreSQL did not come up" >&2; exit 1; }
elif [ "$installed_pg" = yes ]; then
  pg_ctlcluster --skip-systemctl-redirect "$pg_version" main reload
fi

redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; }
if ! redis_up; then
  redis_cmd=(redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no
             --dir /var/lib/redis --logfile /var/log/redis/ci.log)
  if as_root; then
    echo "services: starting Redis"
    mkdir -p /var/lib/redis /var/log/redis
    "${redis_cmd[@]}"
  else
    echo "services: Redis is down; start it with:" >&2
    echo "  sudo ${redis_cmd[*]}" >&2
    exit 1
  fi
  for _ in $(seq 50); do redis_up && break; sleep 0.1; done
  redis_up || { echo "services: Redis did not come up" >&2; exit 1; }
fi
echo "services: PostgreSQL and Redis are up"
