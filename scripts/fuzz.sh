#!/usr/bin/env bash
# Runs every libFuzzer target in fuzz/ for a bounded time from its committed seeds.
#
#   scripts/fuzz.sh                   # each target FUZZ_SECONDS (default 20) seconds
#   FUZZ_SECONDS=600 scripts/fuzz.sh json_event proxy_avro   # longer, some targets
#   scripts/fuzz.sh --build-only      # only build them (scripts/test.sh, beside the tests)
#
# Installs cargo-fuzz (crates.io) when missing. The machine's toolchain is stable, and
# cargo-fuzz passes nightly flags (-Zsanitizer, coverage): RUSTC_BOOTSTRAP=1 lets stable rustc
# take them. No sanitizer: the code under test is safe Rust, so what libFuzzer finds is a
# panic, a crash or an allocation over -malloc_limit_mb (an allocation sized from an
# unchecked length), all of which fail the run.
#
# New inputs that reach new code go to a scratch directory, not the committed corpus; a
# finding is saved in fuzz/artifacts/<target>/ and the run fails. Make it a regression: copy
# the artifact into fuzz/corpus/<target>/ (every run replays the corpus first) and fix it.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_SECONDS=${FUZZ_SECONDS:-20}
# A fixed seed by default: the test suite's run then walks the same inputs every time (how far
# it gets depends on the machine's speed), so a finding reproduces and the suite can't fail at
# random. FUZZ_SEED=0 lets libFuzzer pick one, for exploring.
FUZZ_SEED=${FUZZ_SEED:-1}
export RUSTC_BOOTSTRAP=1
log() { printf '\n== %s\n' "$*" >&2; }

if ! cargo fuzz --version >/dev/null 2>&1; then
  log "cargo install cargo-fuzz 0.13.2"
  cargo install cargo-fuzz --locked --version 0.13.2
fi

build_only=false
if [ "${1:-}" = "--build-only" ]; then
  build_only=true
  shift
fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cd fuzz && cargo fuzz list)
fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
log "cargo fuzz build"
(cd fuzz && cargo fuzz build --sanitizer none)
if $build_only; then
  exit 0
fi
for target in "${targets[@]}"; do
  log "fuzz $target for ${FUZZ_SECONDS}s"
  mkdir -p "$scratch/$target"
  (cd fuzz && cargo fuzz run --sanitizer none "$target" "$scratch/$target" "corpus/$target" -- \
    -max_total_time="$FUZZ_SECONDS" -seed="$FUZZ_SEED" -malloc_limit_mb=256 -rss_limit_mb=2048 \
    -timeout=10 -print_final_stats=1 2>&1 | grep -E "^(stat::|#[0-9]+ +DONE|==|INFO: seed corpus|SUMMARY|thread|panicked)" | grep -Ev "^INFO" || true)
  test -z "$(ls -A "fuzz/artifacts/$target" 2>/dev/null)" || {
    echo "fuzz $target found inputs that fail: fuzz/artifacts/$target/" >&2
    exit 1
  }
done
