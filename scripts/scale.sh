#!/usr/bin/env bash
# hbidx on one node at three sizes: `hbidx bench` on a small, a middle and a large table in one
# run, printed side by side with the ratio large ÷ small, to see what grows with the table and
# what doesn't.
#
#   scripts/scale.sh                              # 100k, 1M and 10M rows, from the repo root
#   SCALE_ROWS=100000000 scripts/scale.sh         # 100M (about 1e8 people: the generator's
#                                                 # uids stop at 99,999,999), where the disk allows
#   SCALE_SMALL=20000 SCALE_MID= SCALE_ROWS=200000 scripts/scale.sh --lookup-seconds 5
#                                                 # extra args go to every `hbidx bench` run
#
# Steps:
#   1. the disk the large run needs (bytes/row × rows: store, index, the reindex's shadow index
#      and, with Kafka, the second data dir the Kafka part fills), against what `df` shows free
#      where the bench writes; refuses when it is short;
#   2. cargo build --profile production --features bench (the binary with `hbidx bench` in it);
#   3. the broker (scripts/test.sh --setup: tansu on 127.0.0.1:9092) unless SCALE_KAFKA is empty;
#      tansu keeps the topic in memory, so the large run also needs RAM for it;
#   4. target/production/hbidx bench --rows N --kafka … --json …, small, middle, large (each run's
#      table and JSON are kept in $SCALE_OUT);
#   5. one markdown table: measure | small | middle | large | ratio, with the machine and the
#      command above it.
#
# Environment: SCALE_SMALL (100000), SCALE_MID (1000000; empty: none), SCALE_ROWS (10000000),
# SCALE_KAFKA (127.0.0.1:9092; empty: no Kafka rows), SCALE_DIR (where the bench's data dirs go: $TMPDIR or /tmp), SCALE_OUT
# (target/scale), SCALE_BYTES_PER_ROW (the disk estimate's bytes per row: 1600 with Kafka, whose
# part fills a second data dir; 600 without, where a 30M run peaked near 480).
set -euo pipefail

SMALL=${SCALE_SMALL:-100000}
MID=${SCALE_MID-1000000}
LARGE=${SCALE_ROWS:-10000000}
KAFKA=${SCALE_KAFKA-127.0.0.1:9092}
DIR=${SCALE_DIR:-${TMPDIR:-/tmp}}
OUT=${SCALE_OUT:-target/scale}
BYTES_PER_ROW=${SCALE_BYTES_PER_ROW:-$([[ -n $KAFKA ]] && echo 1600 || echo 600)}

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'scale.sh: %s\n' "$*" >&2; exit 1; }

[[ -f Cargo.toml && -f bench/src/bench/mod.rs ]] || die "run from the hbidx repository root"
[[ $SMALL =~ ^[0-9]+$ && $LARGE =~ ^[0-9]+$ && $SMALL -gt 0 && $LARGE -gt 0 ]] \
    || die "SCALE_SMALL and SCALE_ROWS must be positive row counts"
[[ -z $MID || ($MID =~ ^[0-9]+$ && $MID -gt $SMALL && $MID -lt $LARGE) ]] \
    || die "SCALE_MID must be empty or a row count between SCALE_SMALL and SCALE_ROWS"
mkdir -p "$DIR" "$OUT"

# --- 1. disk -----------------------------------------------------------------------------------
# The runs are one after the other and each removes its data dir, so the large one decides.
need=$((LARGE * BYTES_PER_ROW))
avail=$(df -P -B1 "$DIR" | awk 'NR == 2 { print $4 }')
gb() { awk -v b="$1" 'BEGIN { printf "%.1f GB", b / 1e9 }'; }
parts="store, index, the reindex's shadow index"
[[ -z $KAFKA ]] || parts+=", the Kafka part's data dir"
log "disk: the $LARGE-row run needs about $(gb "$need") in $DIR ($BYTES_PER_ROW bytes/row:" \
    "$parts); $(gb "$avail") free"
((avail >= need)) || die "not enough free disk in $DIR for $LARGE rows: set SCALE_DIR elsewhere or lower SCALE_ROWS"
if [[ -n $KAFKA ]]; then
    log "memory: tansu keeps the topic in RAM, about $(gb $((LARGE * 400))) for $LARGE events"
fi

# --- 2. build ----------------------------------------------------------------------------------
log "cargo build --profile production --features bench"
cargo build --profile production --features bench
BIN=${CARGO_TARGET_DIR:-target}/production/hbidx
[[ -x $BIN ]] || die "no $BIN after the build"
command -v wrk >/dev/null 2>&1 || log "wrk is missing (apt-get install wrk): no lookup rows"

# --- 3. broker ---------------------------------------------------------------------------------
kafka_args=()
if [[ -n $KAFKA ]]; then
    log "broker: scripts/test.sh --setup"
    HBIDX_TEST_KAFKA=$KAFKA bash scripts/test.sh --setup
    kafka_args=(--kafka "$KAFKA")
fi

# --- 4. runs -----------------------------------------------------------------------------------
run() { # ROWS -> $OUT/scale-ROWS.{md,json}
    log "hbidx bench --rows $1 ${kafka_args[*]} ${*:2}"
    TMPDIR=$DIR "$BIN" bench --rows "$1" "${kafka_args[@]}" --json "$OUT/scale-$1.json" \
        "${@:2}" | tee "$OUT/scale-$1.md"
}
sizes=("$SMALL" ${MID:+"$MID"} "$LARGE")
for rows in "${sizes[@]}"; do
    run "$rows" "$@"
done

# --- 5. the table ------------------------------------------------------------------------------
printf '\n`SCALE_SMALL=%s SCALE_MID=%s SCALE_ROWS=%s scripts/scale.sh%s` (hbidx bench%s)\n\n' \
    "$SMALL" "$MID" "$LARGE" "${*:+ $*}" "${kafka_args[*]:+ ${kafka_args[*]}}"
printf 'Machine: %s CPUs, %s memory, Linux %s\n\n' "$(nproc)" \
    "$(awk '/^MemTotal:/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)" "$(uname -r)"
table_args=()
for rows in "${sizes[@]}"; do
    table_args+=("$rows" "$OUT/scale-$rows.json")
done
python3 scripts/scale_table.py "${table_args[@]}"
