#!/usr/bin/env bash
# Miri over the library and every integration test of the default features, in two processes
# at once (Miri interprets on one thread; each half has its own target directory, since cargo
# holds a target directory's lock while its tests run). Called by .ci/verify.sh:
#
#   bash .ci/miri-halves.sh TARGET_DIR
#
# Half A: the library, the four heaviest test files (HEAVY), then tests/handoff.rs with 64
# fixed seeds. Half B: every other test file of tests/ that builds without a feature (read
# from Cargo.toml), so that a new test file is never left out. Each half's output is printed
# once both are done; the exit status is non-zero if either failed.
set -uo pipefail
cd "$(dirname "$0")/.."
TARGET="${1:-target}"
HEAVY=(collector chrome failures devices)

others=()
while read -r name; do others+=(--test "$name"); done < <(python3 - "${HEAVY[@]}" <<'PY'
import pathlib, sys, tomllib
cargo = tomllib.loads(pathlib.Path("Cargo.toml").read_text())
gated = {t["name"] for t in cargo.get("test", []) if t.get("required-features")}
heavy = set(sys.argv[1:])
for path in sorted(pathlib.Path("tests").glob("*.rs")):
    if path.stem not in gated and path.stem not in heavy:
        print(path.stem)
PY
)
heavy=()
for name in "${HEAVY[@]}"; do heavy+=(--test "$name"); done

half_a() {
    env MIRIFLAGS="-Zmiri-disable-isolation" CARGO_TARGET_DIR="$TARGET/miri-a" \
        cargo +nightly miri test --lib "${heavy[@]}" &&
        env MIRIFLAGS="-Zmiri-many-seeds=0..64" CARGO_TARGET_DIR="$TARGET/miri-a" \
            cargo +nightly miri test --test handoff
}
half_b() {
    env MIRIFLAGS="-Zmiri-disable-isolation" CARGO_TARGET_DIR="$TARGET/miri-b" \
        cargo +nightly miri test "${others[@]}"
}

# Each half says how long it took and how it ended, at the end of its own output.
timed_half() {
    local name="$1" start=$SECONDS status
    "half_$name"
    status=$?
    printf '\n--- Miri, half %s: exit %s after %s s\n' "$name" "$status" "$((SECONDS - start))"
    return "$status"
}

mkdir -p "$TARGET"
timed_half a >"$TARGET/miri-a.log" 2>&1 &
a=$!
timed_half b >"$TARGET/miri-b.log" 2>&1 &
b=$!
# Stopped (a time limit): stop both halves too.
trap 'kill "$a" "$b" 2>/dev/null; exit 124' TERM INT
wait "$a"; status_a=$?
wait "$b"; status_b=$?
printf '\n--- Miri, half a: the library, %s, then the hand-off with 64 seeds\n' "${HEAVY[*]}"
cat "$TARGET/miri-a.log"
printf '\n--- Miri, half b: %s other test files\n' "$((${#others[@]} / 2))"
cat "$TARGET/miri-b.log"
[ "$status_a" -eq 0 ] && [ "$status_b" -eq 0 ]
