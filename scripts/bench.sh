#!/usr/bin/env bash
# hbidx vs PostgreSQL 15: the same indexed lookup by phone (one row, uid + four columns), on the
# same generated people, measured side by side in one run.
#
#   sudo scripts/bench.sh                      # from the repo root, as root, on Debian 12
#   ROWS=1000000 scripts/bench.sh --lookup-seconds 20   # extra args go to `hbidx bench`
#
# Steps:
#   1. apt-get installs wrk and postgresql if they are missing (Rust/cargo must already be
#      installed, e.g. with rustup: Debian's rustc is too old for this workspace);
#   2. cargo build --profile production --features bench; `hbidx bench` (indexing, event->searchable
#      latency, size, RSS, and HTTP lookups by phone with wrk -t2 -c64) which also exports its
#      people as CSV;
#   3. a throwaway PostgreSQL 15 cluster in $WORK on 127.0.0.1 (default settings except
#      shared_buffers=256MB, max_connections=200), loaded with that CSV, phone btree, VACUUM ANALYZE;
#   4. pgbench over TCP, prepared statements, 64 clients, 2 threads: 3 s warm-up, then 10 s,
#      then 10 s more with pgbench under SCHED_BATCH, then 10 s with pgbench kept off the first
#      CPU (taskset; PostgreSQL's backends stay free to use every CPU);
#   5. one markdown table: hbidx's results, PostgreSQL's, and hbidx req/s / PostgreSQL tps,
#      once with both clients normally scheduled and once with both under SCHED_BATCH, once
#      more for hbidx with one HTTP thread (clients normally scheduled), and once for hbidx with
#      one HTTP thread pinned to the first CPU against PostgreSQL, both clients on the other
#      CPUs (a client that doesn't share the server's core, as a remote one wouldn't).
#
# Why two ratios: wrk and pgbench share the two cores with the server they measure. A normally
# scheduled client preempts the server each time a response wakes it. hbidx answers on one
# event-loop thread per core, and then pays a context switch every couple of requests (~1 µs
# more server CPU per lookup, and 10-20% fewer lookups/s);
# PostgreSQL, a process per connection, barely changes.
# Under SCHED_BATCH (chrt --batch 0; any user may) neither client preempts on wakeup: it runs
# when the server waits or at the scheduler tick, as close as a co-located client gets to the
# remote clients a real deployment has. The batch ratio is the one compared with the target;
# both are printed.
#
# Which PostgreSQL query is compared (scripts/pg_lookup.sql): pgbench variables are integers and
# the phones are random, so pgbench cannot name an existing phone directly. The compared script
# draws p uniformly in [min phone, max phone] and runs
#     SELECT uid,name,phone,idcard,city FROM people WHERE phone >= $1 ORDER BY phone LIMIT 1
# All phones have 11 digits, so a row always exists, and the work is that of `phone = $1`: one
# descent of the same btree, one heap fetch, one row. Two alternatives are rejected as unfair:
# picking the phone through a second table costs PostgreSQL an extra index probe per query (it
# is still run and reported as a lower bound, scripts/pg_lookup_via_n.sql), and looking up by an
# integer row number is not the same index. A fixed existing phone (always the same hot pages)
# is reported as an upper bound (scripts/pg_lookup_fixed.sql). The cluster uses the C collation
# (bytewise comparisons, like tantivy's term dictionary), the cheapest setting for PostgreSQL.
#
# Environment: ROWS (default 100000), WORK (default: a new /tmp directory, removed at exit;
# must be reachable by the postgres user), PGPORT (default: first free port from 55432),
# PG_SECONDS (10), PG_WARMUP_SECONDS (3), PG_VARIANTS (1: also run the lower/upper bounds),
# KEEP_WORK (1: keep $WORK), TARGET_RATIO (1.3).
set -euo pipefail

ROWS=${ROWS:-100000}
PG_SECONDS=${PG_SECONDS:-10}
PG_WARMUP_SECONDS=${PG_WARMUP_SECONDS:-3}
PG_VARIANTS=${PG_VARIANTS:-1}
TARGET_RATIO=${TARGET_RATIO:-1.3}
PGBIN=/usr/lib/postgresql/15/bin
PG_CLIENTS=64
PG_THREADS=2

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'bench.sh: %s\n' "$*" >&2; exit 1; }

[[ -f Cargo.toml && -f bench/src/bench/mod.rs ]] || die "run from the hbidx repository root"
[[ $(id -u) -eq 0 ]] || die "run as root (installs packages and runs PostgreSQL as user postgres)"
REPO=$(pwd)

# --- 1. packages -------------------------------------------------------------------------------
missing=()
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
[[ -x $PGBIN/initdb && -x $PGBIN/pgbench && -x $PGBIN/psql ]] || missing+=(postgresql)
if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y "${missing[@]}"
fi
[[ -x $PGBIN/initdb ]] || die "$PGBIN/initdb not found: this script expects Debian 12's PostgreSQL 15"
id postgres >/dev/null 2>&1 || die "no postgres user (the postgresql package creates it)"
if ! command -v cargo >/dev/null 2>&1; then
    # shellcheck disable=SC1091
    [[ -f $HOME/.cargo/env ]] && . "$HOME/.cargo/env"
    command -v cargo >/dev/null 2>&1 || die "cargo not found: install Rust with rustup first"
fi

# --- work directory, cleanup -------------------------------------------------------------------
if [[ -n ${WORK:-} ]]; then
    mkdir -p "$WORK"
    WORK=$(cd "$WORK" && pwd)
    created_work=0
else
    WORK=$(mktemp -d /tmp/hbidx-bench.XXXXXX)
    created_work=1
fi
PGDATA=$WORK/pgdata
pg_started=0

as_pg() { runuser -u postgres -- "$@"; }

cleanup() {
    local rc=$?
    if ((pg_started)); then
        as_pg "$PGBIN/pg_ctl" -D "$PGDATA" -m fast -w stop >/dev/null 2>&1 || true
    fi
    if ((created_work)) && [[ ${KEEP_WORK:-0} != 1 ]]; then
        rm -rf "$WORK"
    else
        log "kept $WORK"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- 2. hbidx ----------------------------------------------------------------------------------
log "cargo build --profile production --features bench"
cargo build --profile production --features bench
log "hbidx bench --rows $ROWS $*"
"$REPO/target/production/hbidx" bench --rows "$ROWS" --export-csv "$WORK/people.csv" "$@" \
    | tee "$WORK/hbidx-bench.md"

hbidx_rows=$(grep '^|' "$WORK/hbidx-bench.md" | grep -v -e '^| measure |' -e '^|---' || true)
[[ -n $hbidx_rows ]] || die "no result table in hbidx bench's output"
# hbidx bench's wrk rows: the client normally scheduled, and under SCHED_BATCH (see step 4).
wrk_rps() { # LABEL -> req/s of that row, or nothing
    grep -F "| $1 |" <<<"$hbidx_rows" | sed -nE 's/^\|[^|]*\| *([0-9]+(\.[0-9]+)?) req\/s.*/\1/p'
}
hbidx_rps=$(wrk_rps 'lookup by phone over HTTP (wrk)')
hbidx_batch_rps=$(wrk_rps 'lookup by phone over HTTP (wrk, SCHED_BATCH)')
# The same server with one HTTP thread ([server] workers = 1), which leaves the other core to
# the co-located wrk: the setting for a 2-core box whose clients run on it.
hbidx_one_rps=$(wrk_rps 'lookup by phone over HTTP, 1 server thread (wrk)')
pinned_row='lookup by phone over HTTP, 1 server thread pinned, wrk on the other CPUs'
hbidx_pinned_rps=$(wrk_rps "$pinned_row")
# The CPUs hbidx bench ran wrk on (all but the one its pinned HTTP thread had); pgbench gets them.
CLIENT_CPUS=$(grep -F "| $pinned_row |" <<<"$hbidx_rows" | sed -nE 's/.*, wrk on CPUs ([0-9,]+) \|$/\1/p')

csv_rows=$(wc -l <"$WORK/people.csv")
[[ $csv_rows -eq $ROWS ]] || die "people.csv has $csv_rows rows, expected $ROWS"
bad=$(awk -F, 'NF != 5 || /"/' "$WORK/people.csv" | head -n 3)
[[ -z $bad ]] || die "people.csv has lines that are not plain 5-field CSV: $bad"

# --- 3. PostgreSQL 15 --------------------------------------------------------------------------
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
if [[ -n ${PGPORT:-} ]]; then
    port_in_use "$PGPORT" && die "PGPORT=$PGPORT is in use"
else
    PGPORT=55432
    while port_in_use "$PGPORT"; do
        PGPORT=$((PGPORT + 1))
        ((PGPORT < 55532)) || die "no free port in 55432..55531"
    done
fi

cp "$REPO/scripts/pg_lookup.sql" "$REPO/scripts/pg_lookup_via_n.sql" \
    "$REPO/scripts/pg_lookup_fixed.sql" "$WORK/"
chown -R postgres: "$WORK"
as_pg test -r "$WORK/people.csv" || die "user postgres cannot read $WORK (set WORK elsewhere)"

log "initdb + start PostgreSQL 15 on 127.0.0.1:$PGPORT"
as_pg "$PGBIN/initdb" -D "$PGDATA" --auth=trust --encoding=UTF8 --locale=C >"$WORK/initdb.log"
cat >>"$PGDATA/postgresql.conf" <<EOF

# hbidx scripts/bench.sh: defaults otherwise (fsync etc. untouched)
listen_addresses = '127.0.0.1'
port = $PGPORT
unix_socket_directories = '$WORK'
shared_buffers = 256MB
max_connections = 200
EOF
if ! as_pg "$PGBIN/pg_ctl" -D "$PGDATA" -l "$WORK/postgres.log" -w start >/dev/null; then
  tail -n 20 "$WORK/postgres.log" >&2 || true
  die "PostgreSQL did not start (its log is above)"
fi
pg_started=1

PSQL=("$PGBIN/psql" -X -q -h 127.0.0.1 -p "$PGPORT" -U postgres -v ON_ERROR_STOP=1)
as_pg "${PSQL[@]}" -d postgres -c 'CREATE DATABASE bench'
PSQL+=(-d bench)

log "loading $ROWS people into PostgreSQL"
as_pg "${PSQL[@]}" <<EOF
CREATE TABLE people(uid text primary key, name text, phone text, idcard text, city text);
\copy people FROM '$WORK/people.csv' WITH (FORMAT csv)
CREATE INDEX people_phone_idx ON people(phone);
-- Only for the lower-bound variant (scripts/pg_lookup_via_n.sql).
CREATE TABLE phone_by_n AS SELECT (row_number() OVER (ORDER BY uid))::int AS n, phone FROM people;
ALTER TABLE phone_by_n ADD PRIMARY KEY (n);
VACUUM (ANALYZE);
EOF

res=$(as_pg "${PSQL[@]}" -At -F ' ' -c 'SELECT count(*), min(phone), max(phone) FROM people')
read -r pg_count pmin pmax <<<"$res"
[[ $pg_count -eq $ROWS ]] || die "PostgreSQL has $pg_count people, expected $ROWS"
[[ $pmin =~ ^[0-9]{11}$ && $pmax =~ ^[0-9]{11}$ ]] || die "unexpected phones: $pmin .. $pmax"
fixed_phone=$(head -n 1 "$WORK/people.csv" | cut -d, -f3)

# The compared query must be a plain index scan on people(phone) returning one row.
plan=$(as_pg "${PSQL[@]}" -At <<EOF
PREPARE q(text) AS SELECT uid, name, phone, idcard, city FROM people WHERE phone >= \$1 ORDER BY phone LIMIT 1;
SET plan_cache_mode = force_generic_plan;
EXPLAIN EXECUTE q('$pmin');
EOF
)
grep -q 'Index Scan using people_phone_idx' <<<"$plan" || die "unexpected plan: $plan"

# --- 4. pgbench --------------------------------------------------------------------------------
# run_pgbench SECONDS SCRIPT [-D var=value ...]: prints "tps latency_ms failed". With
# PG_SCHED=batch pgbench runs under SCHED_BATCH (chrt --batch 0), as hbidx bench's second wrk
# row does: a co-located client that doesn't preempt the server when a response wakes it, the
# closest it gets to a remote one.
run_pgbench() {
    local seconds=$1 script=$2 out sched=()
    shift 2
    [[ ${PG_SCHED:-normal} == batch ]] && sched=(chrt --batch 0)
    [[ ${PG_SCHED:-normal} == offcpu ]] && sched=(taskset -c "$CLIENT_CPUS")
    out=$(cd "$WORK" && as_pg "${sched[@]}" "$PGBIN/pgbench" -h 127.0.0.1 -p "$PGPORT" -U postgres \
        -M prepared -c "$PG_CLIENTS" -j "$PG_THREADS" -T "$seconds" -n -f "$script" "$@" bench 2>&1) \
        || die "pgbench $script failed: $out"
    printf '%s\n' "$out" >>"$WORK/pgbench.log"
    local tps lat failed
    tps=$(sed -nE 's/^tps = ([0-9.]+) .*/\1/p' <<<"$out")
    lat=$(sed -nE 's/^latency average = ([0-9.]+) ms.*/\1/p' <<<"$out")
    failed=$(sed -nE 's/^number of failed transactions: ([0-9]+).*/\1/p' <<<"$out")
    [[ -n $tps && -n $lat ]] || die "cannot parse pgbench output: $out"
    echo "$tps $lat ${failed:-0}"
}
pg_fmt() { # tps latency failed -> table cell
    local cell
    cell=$(awk -v t="$1" -v l="$2" 'BEGIN { printf "%.0f tps, latency avg %.3f ms", t, l }')
    [[ $3 == 0 ]] || cell+=", $3 failed"
    echo "$cell"
}

main_vars=(-D "pmin=$pmin" -D "pmax=$pmax")
log "pgbench warm-up ${PG_WARMUP_SECONDS}s"
res=$(run_pgbench "$PG_WARMUP_SECONDS" pg_lookup.sql "${main_vars[@]}")
log "pgbench ${PG_SECONDS}s: pg_lookup.sql (compared)"
res=$(run_pgbench "$PG_SECONDS" pg_lookup.sql "${main_vars[@]}")
read -r pg_tps pg_lat pg_failed <<<"$res"
log "pgbench ${PG_SECONDS}s: pg_lookup.sql under SCHED_BATCH (compared with wrk under SCHED_BATCH)"
res=$(PG_SCHED=batch run_pgbench "$PG_SECONDS" pg_lookup.sql "${main_vars[@]}")
read -r pgb_tps pgb_lat pgb_failed <<<"$res"
# pgbench on the CPUs hbidx bench kept wrk on; PostgreSQL's backends stay free to use them all.
if [[ -n $hbidx_pinned_rps && -n $CLIENT_CPUS ]]; then
    log "pgbench ${PG_SECONDS}s: pg_lookup.sql on CPUs $CLIENT_CPUS (compared with hbidx's pinned row)"
    res=$(PG_SCHED=offcpu run_pgbench "$PG_SECONDS" pg_lookup.sql "${main_vars[@]}")
    read -r pgo_tps pgo_lat pgo_failed <<<"$res"
fi
if [[ $PG_VARIANTS == 1 ]]; then
    log "pgbench ${PG_SECONDS}s: pg_lookup_via_n.sql (lower bound)"
    res=$(run_pgbench "$PG_SECONDS" pg_lookup_via_n.sql -D "rows=$ROWS")
    read -r lo_tps lo_lat lo_failed <<<"$res"
    log "pgbench ${PG_SECONDS}s: pg_lookup_fixed.sql (upper bound)"
    res=$(run_pgbench "$PG_SECONDS" pg_lookup_fixed.sql -D "phone=$fixed_phone")
    read -r hi_tps hi_lat hi_failed <<<"$res"
fi

# --- 5. report ---------------------------------------------------------------------------------
ratio_cell() { # HBIDX_RPS PG_TPS -> "1.23× (…; target …)"
    if [[ -n $1 ]]; then
        awk -v h="$1" -v p="$2" -v t="$TARGET_RATIO" 'BEGIN {
            r = h / p
            printf "%.2f× (%.0f req/s ÷ %.0f tps; target ≥ %s×: %s)", r, h, p, t, (r >= t ? "met" : "NOT met")
        }'
    else
        echo "n/a: no req/s figure in hbidx bench's wrk rows"
    fi
}

echo
echo "## hbidx vs PostgreSQL 15, $ROWS rows ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) CPUs)"
echo
echo "| measure | result |"
echo "|---|---|"
printf '%s\n' "$hbidx_rows"
echo "| PostgreSQL 15 indexed phone lookup (pgbench -M prepared -c$PG_CLIENTS -j$PG_THREADS) | $(pg_fmt "$pg_tps" "$pg_lat" "$pg_failed") |"
echo "| the same, pgbench under SCHED_BATCH | $(pg_fmt "$pgb_tps" "$pgb_lat" "$pgb_failed") |"
if [[ -n ${pgo_tps:-} ]]; then
    echo "| the same, pgbench on CPUs $CLIENT_CPUS (server unpinned) | $(pg_fmt "$pgo_tps" "$pgo_lat" "$pgo_failed") |"
fi
if [[ $PG_VARIANTS == 1 ]]; then
    echo "| PostgreSQL 15, lower bound: phone picked via a 2nd index probe (not compared) | $(pg_fmt "$lo_tps" "$lo_lat" "$lo_failed") |"
    echo "| PostgreSQL 15, upper bound: one fixed phone (not compared) | $(pg_fmt "$hi_tps" "$hi_lat" "$hi_failed") |"
fi
echo "| hbidx ÷ PostgreSQL, clients normally scheduled (wrk req/s ÷ pgbench tps) | $(ratio_cell "$hbidx_rps" "$pg_tps") |"
echo "| hbidx ÷ PostgreSQL, clients under SCHED_BATCH (compared) | $(ratio_cell "$hbidx_batch_rps" "$pgb_tps") |"
if [[ -n $hbidx_one_rps ]]; then
    echo "| hbidx with 1 HTTP thread ÷ PostgreSQL, clients normally scheduled | $(ratio_cell "$hbidx_one_rps" "$pg_tps") |"
fi
if [[ -n ${pgo_tps:-} ]]; then
    # Against the best of PostgreSQL's three runs: keeping pgbench off a CPU costs PostgreSQL
    # more than it costs hbidx (its 64 backends and pgbench then share the other CPUs).
    pg_best=$(printf '%s\n' "$pg_tps" "$pgb_tps" "$pgo_tps" | sort -g | tail -n 1)
    echo "| hbidx, 1 HTTP thread pinned to one CPU, wrk on the other CPUs ÷ PostgreSQL's best run above | $(ratio_cell "$hbidx_pinned_rps" "$pg_best") |"
fi
