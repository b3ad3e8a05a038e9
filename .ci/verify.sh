#!/usr/bin/env bash
# Verification (docs/verification.md): the mutation run's survivors, the loom models, Miri,
# and ThreadSanitizer.
#
#   mutants  the last full cargo-mutants run (committed in verify/mutants/, made by hand with
#          .ci/mutants.sh): every mutant it left alive is listed as equivalent. No build.
#   loom   stable toolchain; always runs. Bounded models at LOOM_MAX_PREEMPTIONS (default 2):
#          the loom_* targets and the models built into the crate (slots::loom_head, and with
#          the cupti feature backend::cupti::flush::loom_flush).
#   Miri   nightly + miri + rust-src; the hand-off test (tests/handoff.rs) also with 64 seeds.
#   TSan   nightly + rust-src (std is rebuilt with the sanitizer).
#   GenMC  the C11 model of the collect/flush hand-off (verify/), GenMC from
#          ../shared/tools/genmc-build; NOT RUN without it (VERIFY_REQUIRE_GENMC=1: a failure).
#
# Nightly and its components are installed if missing. Where they cannot be (a machine with
# no way to fetch a toolchain), Miri and TSan are reported as NOT RUN in a banner and in the
# summary, never as passed; set VERIFY_REQUIRE_NIGHTLY=1 to make that a failure instead.
# Each step has a time limit, so a hung model fails the run instead of eating CI's time.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never

PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}"
# loom and TSan builds get their own target directories under this one: their flags change
# every crate, and would otherwise evict the normal build (Miri keeps its own, .../miri).
TARGET="${CARGO_TARGET_DIR:-target}"
SUMMARY=()

# When each step began, in seconds since CI started (.ci/run sets CI_STARTED) or this script.
CI_STARTED="${CI_STARTED:-$(date +%s)}"
step() {
    printf '\n=== [%4d s] %s\n' "$(($(date +%s) - CI_STARTED))" "$*"
    df -h --output=avail . | tail -n 1 | sed 's/^ */    (disk free: /; s/$/)/'
}
# Under .ci/run (CI_KEEP_TARGETS=0), each build directory is removed once its steps are done,
# so the disk holds one at a time; run by hand, they are kept for the next run.
done_with() {
    if [ "${CI_KEEP_TARGETS:-1}" = 0 ]; then rm -rf "$@"; fi
}

banner() {
    printf '\n%s\n' "################################################################################"
    printf '### %s\n' "$@"
    printf '%s\n\n' "################################################################################"
}

# Runs "$@" under a time limit of $1 seconds, timing it; records the outcome in the summary.
timed() {
    local name="$1" limit="$2"
    shift 2
    local start=$SECONDS
    if timeout "$limit" "$@"; then
        SUMMARY+=("passed   $name ($((SECONDS - start)) s)")
    else
        local code=$?
        SUMMARY+=("FAILED   $name ($((SECONDS - start)) s, exit $code)")
        [ "$code" -eq 124 ] && banner "$name ran past its limit of $limit s"
        print_summary
        exit 1
    fi
}

print_summary() {
    step "verification summary"
    printf '  %s\n' "${SUMMARY[@]}"
}

# Whether nightly with the given components is usable, installing what is missing.
nightly_with() {
    if ! rustup run nightly rustc --version >/dev/null 2>&1; then
        local IFS=,
        rustup toolchain install nightly --profile minimal --component "$*" || return 1
    fi
    rustup component add --toolchain nightly "$@" || return 1
}

step "loom models (RUSTFLAGS=\"--cfg gpu_event_pool_loom\", LOOM_MAX_PREEMPTIONS=$PREEMPTIONS, release)"
# Feature cupti: the model of the CUPTI record hand-off (cudarc builds without CUDA).
timed "loom build" 1200 env RUSTFLAGS="--cfg gpu_event_pool_loom" CARGO_TARGET_DIR="$TARGET/loom" \
    cargo test --release --features cupti --lib --test 'loom_*' --no-run
timed "loom models" 900 env RUSTFLAGS="--cfg gpu_event_pool_loom" CARGO_TARGET_DIR="$TARGET/loom" \
    LOOM_MAX_PREEMPTIONS="$PREEMPTIONS" cargo test --release --features cupti --test 'loom_*'
# The models built into the crate (loom-tests/head.rs: only slots/ can make the handles it
# checks; loom-tests/cupti_flush.rs and gate.rs: the CUPTI source's queue and gate are private). Only those: the
# crate's other unit tests are not loom models.
timed "loom models in the crate (slots::loom_head, backend::cupti::flush::loom_flush, backend::activity::gate::loom_gate)" 300 \
    env RUSTFLAGS="--cfg gpu_event_pool_loom" CARGO_TARGET_DIR="$TARGET/loom" \
    LOOM_MAX_PREEMPTIONS="$PREEMPTIONS" cargo test --release --features cupti --lib -- loom_head loom_flush loom_gate
done_with "$TARGET/loom"

step "nightly toolchain for Miri and ThreadSanitizer"
if nightly_with miri rust-src; then
    cargo +nightly --version

    step "the public API: as listed in public-api.txt (rustdoc's JSON; .ci/public-api.sh --check)"
    timed "public API" 900 bash .ci/public-api.sh --check
    done_with "$TARGET/api"

    step "Miri: library and every integration test of the default features (compare_exchange_weak fails spuriously here), in two halves at once; then the hand-off with 64 seeds"
    # Miri interprets on one thread: two processes, each with its own target directory (cargo
    # holds a target directory's lock while its tests run), keep both cores busy. Half A: the
    # library and the four heaviest test files, then the collect/flush hand-off
    # (tests/handoff.rs) with fixed seeds, one interleaving and one choice of stale loads per
    # seed (`-Zmiri-seed=N` reruns one); half B: every other test file (listed from tests/ and
    # Cargo.toml, so a new file is never left out). Isolation off: the Chrome sink tests write
    # trace files to a temporary directory. Each half's output follows once both are done.
    timed "Miri (two halves at once; the hand-off's 64 seeds in the first)" 2400 bash .ci/miri-halves.sh "$TARGET"

    step "Miri: the CUPTI source's logic without a GPU (feature cupti: buffers, records, the record hand-off, the link bound)"
    timed "Miri, CUPTI" 900 env MIRIFLAGS="-Zmiri-disable-isolation" CARGO_TARGET_DIR="$TARGET/miri-a" \
        cargo +nightly miri test --features cupti --lib cupti
    done_with "$TARGET/miri-a" "$TARGET/miri-b"

    step "ThreadSanitizer: library and tests, std rebuilt with the sanitizer"
    # The 30-minute timestamp test simulates three here (it is 30 times slower under TSan).
    # allocator_may_return_null: a test asks for a page too large for any address space and
    # expects the allocation to fail, not the sanitizer's allocator to abort.
    timed "ThreadSanitizer" 1200 env RUSTFLAGS="-Zsanitizer=thread" CARGO_TARGET_DIR="$TARGET/tsan" \
        GPU_EVENT_POOL_QUICK_TESTS=1 TSAN_OPTIONS=allocator_may_return_null=1 \
        cargo +nightly test -Zbuild-std --target x86_64-unknown-linux-gnu --lib --tests

    step "ThreadSanitizer: the CUPTI source's logic (feature cupti, its unit tests)"
    timed "ThreadSanitizer, CUPTI" 900 env RUSTFLAGS="-Zsanitizer=thread" CARGO_TARGET_DIR="$TARGET/tsan" \
        TSAN_OPTIONS=allocator_may_return_null=1 \
        cargo +nightly test -Zbuild-std --target x86_64-unknown-linux-gnu --features cupti --lib cupti
    done_with "$TARGET/tsan"
else
    banner "MIRI AND THREADSANITIZER WERE NOT RUN" \
        "rustup could not provide nightly with miri and rust-src on this machine." \
        "Run by hand where it can: rustup component add miri rust-src --toolchain nightly"
    SUMMARY+=("NOT RUN  Miri (no nightly toolchain with miri and rust-src)")
    SUMMARY+=("NOT RUN  ThreadSanitizer (no nightly toolchain with rust-src)")
    if [ "${VERIFY_REQUIRE_NIGHTLY:-0}" = 1 ]; then
        print_summary
        exit 1
    fi
fi

step "GenMC: the C11 model of the collect/flush hand-off (verify/handoff.c), RC11 and IMM"
# genmc-build (the repository's parent's shared/tools) prints GenMC's path, building it if
# missing (about 5 minutes; needs root for LLVM 19). verify/run.sh runs the model for the Rust
# code's orderings (must pass), the negative controls (must fail) and each mutation-table row
# (its verdict in docs/verification.md), liveness included: the lines of VARIANTS (the lines
# of FULL_VARIANTS, minutes each, are run by hand: verify/run.sh GENMC --full). Its time once
# GenMC is built: docs/verification.md, "In CI".
# (This script has cd'd to the repository's root: its parent is "$(dirname "$0")/../..".)
GENMC_BUILD="$(cd .. && pwd)/shared/tools/genmc-build"
GENMC=""
if [ -x "$GENMC_BUILD" ]; then
    start=$SECONDS
    if GENMC="$(timeout 1200 "$GENMC_BUILD" | tail -n 1)" && [ -x "$GENMC" ]; then
        SUMMARY+=("passed   GenMC build/find ($((SECONDS - start)) s): $GENMC")
    else
        GENMC=""
    fi
fi
if [ -n "$GENMC" ]; then
    timed "GenMC hand-off model (RC11, IMM; real code, controls, mutations)" 1800 \
        bash verify/run.sh "$GENMC"
else
    banner "GENMC WAS NOT RUN" \
        "No GenMC: $GENMC_BUILD is missing or failed." \
        "Run by hand where it can: verify/run.sh \$(path/to/genmc-build)"
    SUMMARY+=("NOT RUN  GenMC hand-off model (no genmc-build at $GENMC_BUILD, or it failed)")
    if [ "${VERIFY_REQUIRE_GENMC:-0}" = 1 ]; then
        print_summary
        exit 1
    fi
fi

step "mutation testing: the last full run's survivors are all explained (.ci/mutants.sh --check)"
timed "mutants, survivors explained" 120 bash .ci/mutants.sh --check

print_summary
