#!/usr/bin/env bash
# A shared MLflow tracking server as a team would run it: PostgreSQL (Debian's package, a
# temporary cluster in DIR, run as the unprivileged `postgres` user) as the backend store and
# an artifact root in DIR, served by `mlflow server` on 127.0.0.1.
#
#   URI=$(bash .ci/mlflow_pg.sh start DIR)   # prints http://127.0.0.1:PORT once it answers
#   MLFLOW_TRACKING_URI=$URI tokenfactory run ...
#   bash .ci/mlflow_pg.sh stop DIR            # the server, then PostgreSQL (only what start began)
#
# The Python side needs psycopg2 (pip install -e '.[tracking]').
set -euo pipefail
cmd=${1:?usage: mlflow_pg.sh start|stop DIR}
dir=${2:?usage: mlflow_pg.sh start|stop DIR}
py=${PYTHON:-python}

pg_bin() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [ -n "$d" ] && echo "$d"
}

free_port() {
  "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

as_pg() {  # PostgreSQL refuses to run as root
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "$cmd" in
start)
  if [ -z "$(pg_bin)" ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) >&2
  fi
  bin=$(pg_bin)
  [ -n "$bin" ] || { echo "mlflow_pg.sh: PostgreSQL's initdb not found under /usr/lib/postgresql" >&2; exit 1; }
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  chmod 755 "$dir"
  mkdir -p "$dir/pg" "$dir/artifacts"
  if [ "$(id -u)" = 0 ]; then chown postgres "$dir/pg"; fi
  chmod 700 "$dir/pg"
  pg_port=$(free_port)
  as_pg "$bin/initdb" -D "$dir/pg" -U mlflow --auth=trust -E UTF8 >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; exit 1; }
  # loopback only; the socket in the cluster's own folder (not /var/run/postgresql)
  as_pg "$bin/pg_ctl" -D "$dir/pg" -l "$dir/pg/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $pg_port -k $dir/pg -c max_connections=200" start >/dev/null \
    || { cat "$dir/pg/server.log" >&2; exit 1; }
  echo "$bin" >"$dir/pg_bin"
  as_pg "$bin/createdb" -h 127.0.0.1 -p "$pg_port" -U mlflow mlflow
  port=$(free_port)
  # --workers: parallel sweep jobs log at once; each worker keeps its own pool of connections
  nohup "$py" -m mlflow server --backend-store-uri "postgresql+psycopg2://mlflow@127.0.0.1:$pg_port/mlflow" \
    --artifacts-destination "$dir/artifacts" --host 127.0.0.1 --port "$port" --workers 2 \
    >"$dir/mlflow.log" 2>&1 &
  echo $! >"$dir/mlflow.pid"
  for _ in $(seq 240); do  # the first start creates the schema (alembic migrations): ~10-60 s
    if "$py" -c "import urllib.request, sys; urllib.request.urlopen('http://127.0.0.1:$port/health', timeout=2)" \
        2>/dev/null; then
      echo "http://127.0.0.1:$port"
      exit 0
    fi
    if ! kill -0 "$(cat "$dir/mlflow.pid")" 2>/dev/null; then
      tail -30 "$dir/mlflow.log" >&2
      exit 1
    fi
    sleep 0.5
  done
  echo "mlflow_pg.sh: mlflow server did not answer in 120 s" >&2
  tail -30 "$dir/mlflow.log" >&2
  exit 1
  ;;
stop)
  if [ -f "$dir/mlflow.pid" ]; then
    pid=$(cat "$dir/mlflow.pid")
    # the server and its workers: its own process group's members, by their parent
    for child in $(pgrep -P "$pid" 2>/dev/null || true); do kill "$child" 2>/dev/null || true; done
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$dir/mlflow.pid"
  fi
  if [ -f "$dir/pg_bin" ] && [ -f "$dir/pg/postmaster.pid" ]; then
    as_pg "$(cat "$dir/pg_bin")/pg_ctl" -D "$dir/pg" -m fast -w stop >/dev/null || true
  fi
  ;;
*)
  echo "usage: mlflow_pg.sh start|stop DIR" >&2
  exit 2
  ;;
esac
