#!/usr/bin/env bash
# The test suite, from a fresh machine: installs what the tests need when it is missing, starts
# the Kafka-protocol test broker when it is not running, then runs every test of the workspace,
# the ones plain `cargo test` leaves out included (`cargo test --release --workspace --
# --include-ignored`; extra arguments go to cargo test before its `--`), and for the whole
# suite each fuzz target for a bounded time (scripts/fuzz.sh, which installs cargo-fuzz when
# missing). `--setup` only installs and starts.
#
# Plain `cargo test` runs every unit and in-process test and reports the tests that need what
# only this script provides (a broker, root for a tmpfs, Chromium, Python tools) as ignored,
# each with the reason. This script fails if its run reports any test ignored.
#
# The release profile: the README's first command (`cargo run --release -- demo`) compiles the
# same dependencies, so on a fresh machine they are compiled once for both (Cargo.toml).
#
# - chromium (Debian): tests/dashboard.rs opens /dashboard in headless Chromium and keeps a
#   screenshot in target/dashboard.png. Browsers can't be downloaded here; Debian's is used.
# - tansu 0.6.0 (crates.io) at /opt/tansu/bin/tansu, with in-memory and SQLite storage
#   (features dynostore and libsql, recorded in /opt/tansu/FEATURES): the broker for
#   tests/kafka.rs, left running on 127.0.0.1:9092 for the next run (in-memory storage, so
#   nothing piles up on disk), and the chaos soak's own broker (tests/chaos.rs: SQLite storage,
#   so a restarted broker keeps its log). Built once, at opt-level 1 without debug info: a
#   test broker, so half the build time of the default opt-level 3 matters more than its speed.
#   An installed copy with those features is reused.
# - happybase 1.2.0 (PyPI, pure Python on thriftpy2): the third-party HBase Thrift client that
#   tests/gateway.rs runs against hbidx's Thrift gateway. Installed with pip when missing.
# - schemathesis 4.32.5 and openapi-spec-validator 0.9.0 (PyPI): tests/contract.rs validates
#   /openapi.json and runs schemathesis against a running demo. Installed with pip when missing.
#
# The chaos soak's seed (tests/chaos.rs) is derived from the commit under test unless
# CHAOS_SEED is set, and printed: a failure replays with `CHAOS_SEED=<printed> bash
# scripts/chaos.sh`.
#
# librdkafka needs nothing here: it is built from rdkafka's vendored source with configure/make.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*"; }

need=()
command -v curl >/dev/null || need+=(curl)
command -v python3 >/dev/null || need+=(python3)
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
# HBIDX_CHROMIUM points the test at another browser binary; then nothing is installed.
[ -n "${HBIDX_CHROMIUM:-}" ] || [ -x /usr/bin/chromium ] || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
  log "apt-get install ${need[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${need[@]}"
fi

# Debian's own python3 refuses pip installs (PEP 668) unless told otherwise; a pyenv or venv
# python takes the plain install.
pip_install() {
  log "python3 -m pip install $*"
  python3 -m pip install --quiet "$@" || python3 -m pip install --quiet --break-system-packages "$@"
}
if ! python3 -c 'import happybase, sys; sys.exit(happybase.__version__ != "1.2.0")' 2>/dev/null; then
  pip_install happybase==1.2.0
  python3 -c 'import happybase' || { echo "happybase does not import after installing" >&2; exit 1; }
fi
# `pip show | grep -q` would fail under pipefail when grep stops reading early.
pip_version() { python3 -m pip show "$1" 2>/dev/null | sed -n 's/^Version: //p'; }
if [ "$(pip_version schemathesis)" != 4.32.5 ] || [ "$(pip_version openapi-spec-validator)" != 0.9.0 ]; then
  pip_install schemathesis==4.32.5 openapi-spec-validator==0.9.0
fi
python3 -c 'import schemathesis.cli, openapi_spec_validator' \
  || { echo "schemathesis or openapi-spec-validator does not import after installing" >&2; exit 1; }

TANSU=${HBIDX_TANSU:-/opt/tansu/bin/tansu}
export HBIDX_TEST_KAFKA=${HBIDX_TEST_KAFKA:-127.0.0.1:9092}
host=${HBIDX_TEST_KAFKA%:*}
port=${HBIDX_TEST_KAFKA##*:}
up() { (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; }
TANSU_FEATURES=dynostore,libsql
TANSU_ROOT=$(dirname "$(dirname "$TANSU")")
export HBIDX_TANSU=$TANSU

# The two tools built from crates.io: tansu (HBIDX_TANSU names a broker binary of one's own,
# used as it is) and cargo-fuzz for scripts/fuzz.sh (which installs it too when run alone).
# They compile at the lowest CPU priority: on a fresh machine they build beside the build
# someone waits for (the first run's demo in CI, the test build here), which then gets the cores
# whenever it can use them and leaves the installs its serial stretches.
install_tools() {
  if [ "$TANSU" = /opt/tansu/bin/tansu ] \
    && { [ ! -x "$TANSU" ] || [ "$(cat "$TANSU_ROOT/FEATURES" 2>/dev/null)" != "$TANSU_FEATURES" ]; }; then
    log "cargo install tansu 0.6.0 ($TANSU_FEATURES) into $TANSU_ROOT"
    CARGO_PROFILE_RELEASE_OPT_LEVEL=1 CARGO_PROFILE_RELEASE_DEBUG=false \
      nice -n 19 cargo install tansu --locked --force --version 0.6.0 --features "$TANSU_FEATURES" \
      --root "$TANSU_ROOT"
    echo "$TANSU_FEATURES" >"$TANSU_ROOT/FEATURES"
  fi
  if ! cargo fuzz --version >/dev/null 2>&1; then
    log "cargo install cargo-fuzz 0.13.2"
    nice -n 19 cargo install cargo-fuzz --locked --version 0.13.2
  fi
}

start_broker() {
  up && return 0
  log "start tansu on $HBIDX_TEST_KAFKA"
  mkdir -p target/test-broker
  # The default listener is 0.0.0.0; always bind loopback.
  nohup "$TANSU" broker \
    --listener-url "tcp://$HBIDX_TEST_KAFKA" \
    --advertised-listener-url "tcp://$HBIDX_TEST_KAFKA" \
    --storage-engine memory://tansu/ >target/test-broker/tansu.log 2>&1 &
  for _ in $(seq 1 100); do up && break; sleep 0.1; done
  up || { cat target/test-broker/tansu.log; echo "tansu did not start" >&2; exit 1; }
}

if [ "${1:-}" = "--setup" ]; then
  install_tools
  start_broker
  exit 0
fi

# Waits for a job started in the background, prints its output, fails the run if it failed.
join_background() { # pid log what after
  local t
  t=$(date +%s)
  if ! wait "$1"; then
    cat "$2"
    echo "$3 failed" >&2
    exit 1
  fi
  cat "$2"
  log "$3: done $(($(date +%s) - t)) s after $4"
}

# On a fresh machine the tools compile beside the test build: both are mostly compiling, and
# side by side they keep both cores busy through each one's serial stretches.
tools_log=$(mktemp)
results=$(mktemp)
trap 'rm -f "$tools_log" "$results"' EXIT
install_tools >"$tools_log" 2>&1 &
tools_pid=$!

# A seed per commit: the same commit replays the same fault plan and ops.
if [ -z "${CHAOS_SEED:-}" ]; then
  commit=$(git rev-parse --short=8 HEAD 2>/dev/null || echo 1)
  CHAOS_SEED=$((16#$commit))
fi
export CHAOS_SEED
log "cargo test --release --workspace $* --no-run"
t=$(date +%s)
cargo test --release --workspace "$@" --no-run
log "built in $(($(date +%s) - t)) s"
join_background "$tools_pid" "$tools_log" "installing tansu or cargo-fuzz" "the test build"
start_broker

# The whole suite (no selection of packages or tests) ends with each libFuzzer target for a
# bounded time from its committed seeds (scripts/fuzz.sh; FUZZ_SECONDS=0 skips it). Their build
# shares nothing with the tests' (instrumented, its own target dir), so it runs while the
# tests do, at the lowest CPU priority: it takes the cores only while the tests wait (on
# sockets, brokers, timers), so it doesn't slow them.
fuzz=false
if { [ $# -eq 0 ] || [ "$*" = "--no-fail-fast" ]; } && [ "${FUZZ_SECONDS:-20}" != 0 ]; then
  fuzz=true
  fuzz_log=$(mktemp)
  # In a process group of its own, so that a failing test run, which ends this script here
  # (set -e), takes the whole fuzz build with it instead of leaving cargo compiling, orphaned.
  setsid nice -n 19 bash scripts/fuzz.sh --build-only >"$fuzz_log" 2>&1 &
  fuzz_pid=$!
  trap 'kill -- -"$fuzz_pid" 2>/dev/null || true; rm -f "$tools_log" "$results" "$fuzz_log"' EXIT
fi

log "cargo test --release --workspace $* -- --include-ignored (CHAOS_SEED=$CHAOS_SEED)"
t=$(date +%s)
cargo test --release --workspace "$@" -- --include-ignored 2>&1 | tee "$results"
log "tests ran in $(($(date +%s) - t)) s"
# Every test ran: a test reported ignored here would be one that checked nothing.
if grep -E '^test result: .* [1-9][0-9]* ignored' "$results"; then
  echo "tests were reported ignored above: every test must run in the full suite" >&2
  exit 1
fi

if $fuzz; then
  join_background "$fuzz_pid" "$fuzz_log" "building the fuzz targets" "the tests"
  t=$(date +%s)
  bash scripts/fuzz.sh
  log "fuzz targets run in $(($(date +%s) - t)) s"
fi
