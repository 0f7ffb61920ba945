#!/usr/bin/env bash
# A sharded tier against one instance, on the same rows, measured side by side in one run.
#
#   scripts/bench-cluster.sh                  # from the repo root; needs wrk (apt-get install wrk)
#   ROWS=300000 SHARDS=3 SECONDS_PER_RUN=10 scripts/bench-cluster.sh
#
# Steps:
#   1. cargo build --profile production; `hbidx demo --no-serve` loads ROWS generated people into an
#      embedded store, which `hbidx serve --thrift-listen` then serves as "HBase" (Thrift1);
#   2. one unsharded instance and a tier of SHARDS shards (one replica each), all with the rows
#      in that "HBase" and no Kafka source; each builds its index with `reindex --from-store`,
#      the tier's shards at once (each scans only its own range): rows/s per instance;
#   3. wrk (1 thread, 32 connections, SECONDS_PER_RUN s) looking up random phones of the
#      loaded rows, alternately against the unsharded instance and through shard 0 of the tier
#      (which fans every lookup out to all shards), RUNS times each;
#   4. one markdown table.
#
# Every process shares the machine's cores with wrk: on a small machine the tier's figures are
# those of SHARDS + 2 processes on the same cores, so compare the ratio, not the absolute rates.
#
# Environment: ROWS (100000), SHARDS (3), RUNS (2), SECONDS_PER_RUN (10), WORK (a new /tmp
# directory, removed at exit), KEEP_WORK (1: keep it).
set -euo pipefail

ROWS=${ROWS:-100000}
SHARDS=${SHARDS:-3}
RUNS=${RUNS:-2}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-10}
WORK=${WORK:-$(mktemp -d /tmp/hbidx-cluster-bench.XXXXXX)}
KEY=hbidx_aGJpZHggYmVuY2gtY2x1c3RlciBrZXkuLi4uLi4uLi4
export HBIDX_API_KEY=$KEY
# The shards' key for each other's internal routes (the cluster scope alone).
export HBIDX_CLUSTER_KEY=hbidx_aGJpZHggYmVuY2gtY2x1c3RlciBwZWVycycga2V5Li4

command -v wrk >/dev/null || { echo "wrk is needed: apt-get install wrk" >&2; exit 2; }
cleanup() {
    jobs -p | xargs -r kill 2>/dev/null || true
    wait 2>/dev/null || true
    [ "${KEEP_WORK:-0}" = 1 ] || rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

cargo build --profile production --quiet
BIN=$PWD/target/production/hbidx
EXAMPLE=$PWD/deploy/config/hbidx.toml

echo "loading $ROWS rows into the HBase stand-in" >&2
"$BIN" demo --rows "$ROWS" --no-serve --data-dir "$WORK/hbase" >/dev/null 2>&1
THRIFT=127.0.0.1:$(free_port)
printf '%s\n[server]\nthrift_hbase_version = 1\n' "$(cat "$EXAMPLE")" >"$WORK/standin.toml"

# Starts `hbidx serve` with the given args; waits for its "listening on" line.
start() {
    local log=$1; shift
    "$BIN" "$@" >"$log" 2>&1 &
    for _ in $(seq 600); do
        grep -q "listening on http://" "$log" && return 0
        sleep 0.2
    done
    echo "did not start: $*" >&2; cat "$log" >&2; exit 1
}

start "$WORK/standin.log" --config "$WORK/standin.toml" serve --data-dir "$WORK/hbase" \
    --listen 127.0.0.1:0 --thrift-listen "$THRIFT"
STANDIN=$(grep -o 'listening on http://[0-9.:]*' "$WORK/standin.log" | head -1 | cut -d/ -f3)

hbase_config() {
    printf '%s\n[store]\nkind = "hbase"\nthrift = "%s"\ntimeout_ms = 5000\npool_size = 16\n%s\n' \
        "$(cat "$EXAMPLE")" "$THRIFT" "$1"
}
hbase_config "" >"$WORK/single.toml"
PORTS=()
URLS=()
for shard in $(seq 0 $((SHARDS - 1))); do
    PORTS+=("$(free_port)")
    URLS+=("[\"http://127.0.0.1:${PORTS[$shard]}\"]")
done
hbase_config "[cluster]
shards = [$(IFS=,; echo "${URLS[*]}")]" >"$WORK/tier.toml"

SINGLE_PORT=$(free_port)
start "$WORK/single.log" --config "$WORK/single.toml" serve --data-dir "$WORK/single" \
    --listen "127.0.0.1:$SINGLE_PORT"
for shard in $(seq 0 $((SHARDS - 1))); do
    start "$WORK/shard$shard.log" --config "$WORK/tier.toml" --shard "$shard" serve \
        --data-dir "$WORK/shard$shard" --listen "127.0.0.1:${PORTS[$shard]}"
done

# Builds an index from the store; prints seconds taken.
reindex() {
    local config=$1 url=$2 started
    started=$(date +%s.%N)
    "$BIN" --config "$config" reindex user --from-store --server "$url" --api-key "$KEY" \
        >/dev/null 2>&1
    echo "$(date +%s.%N) - $started" | bc
}
rows_of() {
    curl -s -H "Authorization: Bearer $KEY" "$1/v1/indexer/status" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["tables"]["user"]["rows"])'
}
echo "reindexing the unsharded instance" >&2
SINGLE_SECONDS=$(reindex "$WORK/single.toml" "http://127.0.0.1:$SINGLE_PORT")
echo "reindexing $SHARDS shards at once" >&2
for shard in $(seq 0 $((SHARDS - 1))); do
    reindex "$WORK/tier.toml" "http://127.0.0.1:${PORTS[$shard]}" >"$WORK/reindex$shard.txt" &
done
wait $(jobs -p | tail -n "$SHARDS")
TIER_SECONDS=$(sort -n "$WORK"/reindex*.txt | tail -1)
SHARD_ROWS=()
for shard in $(seq 0 $((SHARDS - 1))); do
    SHARD_ROWS+=("$(rows_of "http://127.0.0.1:${PORTS[$shard]}")")
done

# Phones of the loaded rows, for wrk: a few surnames' worth, read through the stand-in.
for surname in 王 李 张 刘 陈 杨 黄 赵; do
    curl -s -G -H "Authorization: Bearer $KEY" "http://$STANDIN/v1/tables/user/rows" \
        --data-urlencode "name=$surname" --data-urlencode match=prefix \
        --data-urlencode limit=1000 --data-urlencode columns=info:phone
done | python3 -c '
import json, sys
decoder = json.JSONDecoder()
text = sys.stdin.read()
phones, at = [], 0
while at < len(text):
    body, at = decoder.raw_decode(text, at)
    phones += [row["cells"]["info:phone"] for row in body["rows"]]
print("phones = {" + ",".join(chr(34) + p + chr(34) for p in phones) + "}")
' >"$WORK/phones.lua"
cat >>"$WORK/phones.lua" <<EOF
request = function()
  local phone = phones[math.random(#phones)]
  return wrk.format("GET", "/v1/tables/user/rows?phone=" .. phone, {["Authorization"] = "Bearer $KEY"})
end
EOF

# One wrk run; prints "req/s p50_ms p99_ms".
run_wrk() {
    wrk -t1 -c32 -d"${SECONDS_PER_RUN}s" --latency -s "$WORK/phones.lua" "$1" |
        python3 -c '
import re, sys
text = sys.stdin.read()
def ms(label):
    m = re.search(r"^\s*" + label + r"\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
    v, unit = float(m.group(1)), m.group(2)
    return v / 1000 if unit == "us" else v * 1000 if unit == "s" else v
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
errors = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
if errors: sys.exit("wrk saw %s failed lookups" % errors.group(1))
print("%.0f %.2f %.2f" % (rps, ms("50%"), ms("99%")))
'
}
# Warm both, then alternate.
SECONDS_PER_RUN=2 run_wrk "http://127.0.0.1:$SINGLE_PORT" >/dev/null
SECONDS_PER_RUN=2 run_wrk "http://127.0.0.1:${PORTS[0]}" >/dev/null
: >"$WORK/single.runs"
: >"$WORK/tier.runs"
for _ in $(seq "$RUNS"); do
    run_wrk "http://127.0.0.1:$SINGLE_PORT" >>"$WORK/single.runs"
    run_wrk "http://127.0.0.1:${PORTS[0]}" >>"$WORK/tier.runs"
done

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
col() { awk -v c="$2" '{print $c}' "$1" | median; }
S_RPS=$(col "$WORK/single.runs" 1); T_RPS=$(col "$WORK/tier.runs" 1)
S_P50=$(col "$WORK/single.runs" 2); T_P50=$(col "$WORK/tier.runs" 2)
S_P99=$(col "$WORK/single.runs" 3); T_P99=$(col "$WORK/tier.runs" 3)

echo
echo "$ROWS rows, $SHARDS shards (rows per shard: ${SHARD_ROWS[*]}), $(nproc) CPUs, medians of $RUNS wrk runs of ${SECONDS_PER_RUN} s"
echo
echo "| | unsharded instance | tier, through shard 0 | tier / unsharded |"
echo "|---|---|---|---|"
printf '| lookups by phone, req/s | %s | %s | %.2f |\n' "$S_RPS" "$T_RPS" "$(echo "$T_RPS / $S_RPS" | bc -l)"
printf '| lookup p50, ms | %s | %s | %.2f |\n' "$S_P50" "$T_P50" "$(echo "$T_P50 / $S_P50" | bc -l)"
printf '| lookup p99, ms | %s | %s | %.2f |\n' "$S_P99" "$T_P99" "$(echo "$T_P99 / $S_P99" | bc -l)"
printf '| reindex --from-store, s | %.1f | %.1f (shards at once) | %.2f |\n' "$SINGLE_SECONDS" "$TIER_SECONDS" "$(echo "$TIER_SECONDS / $SINGLE_SECONDS" | bc -l)"
printf '| reindex rows/s per instance | %.0f | %.0f (largest shard) | |\n' \
    "$(echo "$ROWS / $SINGLE_SECONDS" | bc -l)" \
    "$(echo "$(printf '%s\n' "${SHARD_ROWS[@]}" | sort -n | tail -1) / $TIER_SECONDS" | bc -l)"
