#!/usr/bin/env bash
# Makes sure the local Postgres, Redis and NATS servers the tests use are up,
# starting any that are not (Debian packages, default ports). It changes
# nothing when they already run.
set -euo pipefail

up() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_up() {
  local name=$1 port=$2
  for _ in $(seq 1 100); do
    up "$port" && return 0
    sleep 0.1
  done
  echo "services: $name did not come up on port $port" >&2
  return 1
}

if ! up 5432; then
  echo "services: starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start
  wait_up postgres 5432
fi
if ! up 6379; then
  echo "services: starting Redis"
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  wait_up redis 6379
fi
if ! up 4222; then
  echo "services: starting NATS"
  mkdir -p /var/lib/nats-server
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
    -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log
  wait_up nats 4222
fi
echo "services: postgres :5432, redis :6379, nats :4222 up"
