# Shared helpers for bench/serve/*.sh (sourced, not run).

# wait_http URL SECONDS: until GET URL answers 200.
wait_http() {
  local url="$1" limit="${2:-120}" i
  for ((i = 0; i < limit * 10; i++)); do
    if curl -fsS -o /dev/null "$url" 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "bench/serve: $url did not come up within ${limit}s" >&2
  return 1
}

# free_port: a TCP port nothing listens on now.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# stop_pid PID: SIGTERM, then SIGKILL after 10 s.
stop_pid() {
  local pid="$1" i
  kill "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 100; i++)); do
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
