#!/usr/bin/env bash
# Several `lmchat serve` replicas behind HAProxy on this machine, one command (docs/scaling.md):
#
#   deploy/local.sh [N] [-- lmchat serve options...]     e.g. deploy/local.sh 3 -- --threads 1 --ctx 8192
#
# starts redis-server (the replicas' one session store), N replicas of `lmchat serve --backend llamacpp` on the
# bundled model (or --model) sharing that store and one KV directory and key (--kv-shared), and HAProxy routing
# each conversation to one replica (deploy/haproxy.cfg). Ctrl-C stops them all. Where:
#   LMCHAT_LB_PORT       the balancer's port (default 8000): http://127.0.0.1:8000/v1 is the API
#   LMCHAT_LB_STATS_PORT HAProxy's stats page and Prometheus metrics (default 8404: /, /metrics)
#   LMCHAT_REPLICA_PORT  the first replica's port (default 8101; the next ones follow)
#   LMCHAT_REDIS_PORT    redis-server's port (default 6390)
#   LMCHAT_DEPLOY_DIR    the store's, the KV files' and the logs' directory (default: a new one under /tmp; kept)
#   LMCHAT_KV_SHARED     dir (default): the shared KV tier is a directory; redis: it is database 1 of that Redis
set -euo pipefail

n=3
if [[ $# -gt 0 && $1 != -- ]]; then n=$1; shift; fi
if [[ $# -gt 0 && $1 == -- ]]; then shift; fi
[[ $n =~ ^[1-9][0-9]*$ ]] || { echo "usage: $0 [N] [-- lmchat serve options]" >&2; exit 2; }

here=$(cd "$(dirname "$0")" && pwd)
lb_port=${LMCHAT_LB_PORT:-8000}
stats_port=${LMCHAT_LB_STATS_PORT:-8404}
first_port=${LMCHAT_REPLICA_PORT:-8101}
redis_port=${LMCHAT_REDIS_PORT:-6390}
dir=${LMCHAT_DEPLOY_DIR:-$(mktemp -d /tmp/lmchat-deploy-XXXXXX)}
case ${LMCHAT_KV_SHARED:-dir} in
    dir) shared=(--kv-shared) ;;
    redis) shared=(--kv-shared "redis://127.0.0.1:$redis_port/1") ;;
    *) echo "LMCHAT_KV_SHARED is dir or redis" >&2; exit 2 ;;
esac
mkdir -p "$dir"
python=${PYTHON:-python3}
for tool in redis-server haproxy; do
    command -v "$tool" >/dev/null || { echo "$tool is missing (Debian: apt-get install $tool)" >&2; exit 1; }
done

pids=()
stop() {
    trap - INT TERM EXIT
    echo "stopping..." >&2
    # in reverse order: HAProxy, the replicas (SIGTERM: running turns finish within --shutdown-grace and are
    # saved), Redis last
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap stop INT TERM EXIT

wait_for() {  # URL NAME PID
    for _ in $(seq 600); do
        kill -0 "$3" 2>/dev/null || { echo "$2 exited: see $dir/$2.log" >&2; exit 1; }
        if "$python" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)" "$1" \
            2>/dev/null; then return 0; fi
        sleep 0.2
    done
    echo "$2 did not answer at $1: see $dir/$2.log" >&2
    exit 1
}

# the store: appendonly, so that a restarted redis-server keeps every session
redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$dir" --appendonly yes --save "" \
    >"$dir/redis.log" 2>&1 &
pids+=($!)

# one key for the replicas' KV files (HMAC): whoever cannot read it cannot make a replica load a state
if [[ ! -f $dir/kv.key ]]; then
    (umask 077 && "$python" -c "import secrets; print(secrets.token_hex(32))" >"$dir/kv.key")
fi

# the CPUs shared out (a later --threads among the options wins)
threads=$(( $(nproc) / n )); (( threads >= 1 )) || threads=1

cfg=$dir/haproxy.cfg
cp "$here/haproxy.cfg" "$cfg"
for ((i = 1; i <= n; i++)); do
    port=$((first_port + i - 1))
    name=replica-$i
    "$python" -m lmchat serve --backend llamacpp --port "$port" --replica-name "$name" --threads "$threads" \
        --store "redis://127.0.0.1:$redis_port/0" --kv-dir "$dir/kv" "${shared[@]}" --kv-key-file "$dir/kv.key" \
        "$@" >"$dir/$name.log" 2>&1 &
    pids+=($!)
    echo "    server $name 127.0.0.1:$port" >>"$cfg"
done
for ((i = 1; i <= n; i++)); do
    wait_for "http://127.0.0.1:$((first_port + i - 1))/health" "replica-$i" "${pids[i]}"
done

LMCHAT_LB_BIND=127.0.0.1:$lb_port LMCHAT_LB_STATS_BIND=127.0.0.1:$stats_port \
    haproxy -db -f "$cfg" >"$dir/haproxy.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$lb_port/health" haproxy "${pids[-1]}"

cat <<EOF
$n replicas behind HAProxy: http://127.0.0.1:$lb_port/v1 (the page: http://127.0.0.1:$lb_port/)
HAProxy's stats: http://127.0.0.1:$stats_port/ (Prometheus: /metrics); each replica's: its port's /metrics
store: redis://127.0.0.1:$redis_port/0; KV: ${shared[*]} (--kv-dir $dir/kv); logs: $dir/*.log
Ctrl-C stops them all.
EOF
# a replica that dies stays down (its conversations go on on the others); the balancer's end ends it all
wait "${pids[-1]}" || true
echo "haproxy exited: see $dir/haproxy.log" >&2
