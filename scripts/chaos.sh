#!/usr/bin/env bash
# The chaos soak at full length (tests/chaos.rs explains the parts, the faults and the oracle):
# release binaries, 24 kill -9 of hbidx plus broker, "HBase" and disk-full faults, then the
# oracle; prints the faults, the ops, the lookups by status and the oracle's counts. The test
# suite runs the same test short (6 kills, with a seed derived from the commit).
#
#   bash scripts/chaos.sh                       # CHAOS_KILLS=24, a seed from the clock (printed)
#   CHAOS_SEED=1764139200 bash scripts/chaos.sh # replay a run's fault plan and ops
#   CHAOS_ONLY=disk,broker bash scripts/chaos.sh  # only those faults (kill, reindex, idle,
#                                               # broker, hbase, disk), to find which one a
#                                               # failure needs
#   CHAOS_FORMAT=proxy bash scripts/chaos.sh    # events as the HBase Kafka Proxy writes them
#                                               # (proxy) or hbidx JSON (json); default: by
#                                               # the seed's parity
#
# Loopback only. Needs root (it mounts a 64 MB tmpfs for the data directory) and tansu with
# SQLite storage, which `scripts/test.sh --setup` installs.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/test.sh --setup
export CHAOS_KILLS=${CHAOS_KILLS:-24}
printf '\n== chaos soak: cargo test --release --test chaos (CHAOS_KILLS=%s)\n' "$CHAOS_KILLS"
cargo test --release --test chaos -- --include-ignored --nocapture
