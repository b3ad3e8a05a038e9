#!/usr/bin/env bash
# Runs the C11 model of the collect/flush hand-off (verify/handoff.c) under GenMC, RC11 and
# IMM, for the Rust code's orderings (must pass), the negative controls (must fail) and the
# mutation table's rows of docs/verification.md (each must give the verdict written there).
# Every run checks liveness too (--check-liveness on the model's awaits, --disable-spin-assume:
# see handoff.c's header). Verdicts: pass; fail (an assertion or a race: a safety violation);
# live (a liveness violation: an await that never ends); error (no verdict).
#
#   verify/run.sh GENMC_PATH [--report] [--full]
#
# --report: print the verdicts without comparing them with the expected ones.
# --full: also the lines of FULL_VARIANTS (the Rust code with ROUNDS = 3, and the passing rows
#         that run scenario 1, whose IMM exploration takes minutes): by hand, not in CI.
# VERIFY_VARIANTS=REGEX: only the lines whose name matches.
# Exit status: non-zero on any unexpected verdict.
set -euo pipefail
GENMC="${1:?usage: verify/run.sh GENMC_PATH [--report] [--full]}"
shift
REPORT=""
FULL=""
for arg in "$@"; do
    case "$arg" in
        --report) REPORT=1 ;;
        --full) FULL=1 ;;
        *) echo "verify/run.sh: unknown argument $arg" >&2; exit 2 ;;
    esac
done
# Seconds one GenMC run (one variant, model and scenario) may take: the longest (scenario 1
# under IMM) took 2.5 to 5 minutes on 2 cores shared with other builds; a run that hangs gives
# no verdict ("error") instead of holding CI.
LIMIT="${GENMC_RUN_LIMIT:-600}"
cd "$(dirname "$0")"

# name | expected under rc11 | under imm | -D flags (the mutation's macros) | scenarios: the
# Rust code runs in all six; a mutation row in those whose hand-offs use what it weakens
# (docs/verification.md says which, row by row); a control that must fail, a witness and a
# failing row in the one it fails in.
VARIANTS=(
    "rust-code|pass|pass||1 2 3 4 5 6"
    "control-a:no-look-after-unlock|fail|fail|-DNO_LOOK_AFTER_UNLOCK|1"
    "control-b:no-fences+empty-load-SeqCst|fail|fail|-DNO_FENCE_BEFORE_TRY_LOCK -DNO_FENCE_AFTER_UNLOCK -DEMPTY_LOAD=SC|1"
    "row:reading-drop-Relaxed|pass|fail|-DORD_READING_DROP=RLX|2 3"
    "row:flush-wait-Relaxed|pass|pass|-DORD_FLUSH_WAIT=RLX|2 3"
    "row:flush-start-Relaxed|pass|pass|-DORD_FLUSH_START=RLX|2 3 5"
    "row:enter-AcqRel|pass|pass|-DORD_ENTER=AR -DORD_ENTER_LOAD=ACQ|2 3 5"
    "row:enter-Release|pass|pass|-DORD_ENTER=REL -DORD_ENTER_LOAD=RLX|2 3 5"
    "row:enter-Relaxed|fail|fail|-DORD_ENTER=RLX -DORD_ENTER_LOAD=RLX|2"
    "row:no-fence-before-try-lock|fail|fail|-DNO_FENCE_BEFORE_TRY_LOCK|1"
    # A void place (scenario 4) is announced by `any`, a plain load: without the fence after the
    # unlock it is missed (with lists only, is_empty_now's RMW stands in for it: FULL_VARIANTS).
    "row:no-fence-after-unlock|fail|fail|-DNO_FENCE_AFTER_UNLOCK|4"
    "row:no-fences|fail|fail|-DNO_FENCE_BEFORE_TRY_LOCK -DNO_FENCE_AFTER_UNLOCK|1"
    "row:no-fence-after-unlock+empty-load-Relaxed|fail|fail|-DNO_FENCE_AFTER_UNLOCK -DEMPTY_LOAD=RLX|1"
    "row:no-fence-after-unlock+empty-load-SeqCst|fail|fail|-DNO_FENCE_AFTER_UNLOCK -DEMPTY_LOAD=SC|1"
    "control:no-missed-collect|fail|fail|-DNO_MISSED_COLLECT|2"
    # The rounds and the last-round hand-over. With ROUNDS = 2 a flush's second round is its
    # last (scenarios 2 and 5 reach it); with 3, the take-over needs a third push after it.
    "control-c:no-take-over|fail|fail|-DNO_TAKE_OVER|2"
    "row:no-begin-round-fence|fail|fail|-DNO_BEGIN_ROUND_FENCE|2"
    "limit:ROUNDS=3,no-take-over|pass|pass|-DROUNDS=3 -DNO_TAKE_OVER|2 5"
    "limit:ROUNDS=3,no-begin-round-fence|pass|pass|-DROUNDS=3 -DNO_BEGIN_ROUND_FENCE|2 5"
    # The void places (scenarios 4 and 5: no other scenario gives a place up).
    "row:void-any-Relaxed|pass|pass|-DORD_VOID_SET=RLX -DORD_VOID_LOAD=RLX -DORD_VOID_CLEAR=RLX|4 5"
    "row:void-any-Relaxed+no-fence-after-unlock|fail|fail|-DORD_VOID_SET=RLX -DORD_VOID_LOAD=RLX -DORD_VOID_CLEAR=RLX -DNO_FENCE_AFTER_UNLOCK|4"
    "control-d:no-voids-in-hand-over|fail|fail|-DNO_VOIDS_IN_HAND_OVER|5"
    "control-e:no-voids-after-unlock|fail|fail|-DNO_VOIDS_AFTER_UNLOCK|4"
    # The shared read batches (scenario 1: a collector that takes both lists shares them).
    "control-f:batch-shared-without-lock|fail|fail|-DSHARE_WITHOUT_LOCK|1"
    "control-g:taker-claims-once|fail|fail|-DTAKER_CLAIMS_ONCE|1"
    # Liveness. The flush's wait for readers is a fetch_add(0) loop, an RMW in each iteration,
    # which GenMC 0.11's liveness check does not judge (the next-but-one line): the same wait as
    # a load (FLUSH_WAIT_LOAD) is the form whose liveness is checked.
    "rust-code:flush-wait-as-load|pass|pass|-DFLUSH_WAIT_LOAD=SC|2 3 5"
    "control-live-a:reader-never-leaves|live|live|-DNO_READING_DROP -DFLUSH_WAIT_LOAD=SC|2 3"
    "limit:reader-never-leaves,wait-as-RMW|pass|pass|-DNO_READING_DROP|2 3"
    "control-live-b:take-over-never-try-locks|live|live|-DTAKE_OVER_NO_TRY_LOCK|1 2"
    # The read batches' re-probe limit binding at the first probed list (scenario 6).
    "rust-code:CONTENDED_REPROBES=0|pass|pass|-DCONTENDED_REPROBES=0|6"
    # Witnesses: some execution reaches the case (a run that never did would pass).
    "witness:shared-piece|fail|fail|-DWITNESS_SHARED_PIECE|1"
    "witness:reprobe-limit|fail|fail|-DWITNESS_REPROBE_LIMIT -DCONTENDED_REPROBES=0|6"
    "witness:take-over-from-last-round|fail|fail|-DWITNESS_TAKE_OVER|2"
)

# By hand (--full): the same format.
FULL_VARIANTS=(
    "rust-code:ROUNDS=3|pass|pass|-DROUNDS=3|1 2 3 4 5 6"
    # Without a void place (scenarios 1 to 3) is_empty_now's RMW stands in for the fence after
    # the unlock.
    "row:no-fence-after-unlock,lists-only|pass|pass|-DNO_FENCE_AFTER_UNLOCK|1 2 3"
    "row:empty-load-Relaxed|pass|pass|-DEMPTY_LOAD=RLX|1 2 4"
    "row:handover-RMW+seen-Relaxed|pass|pass|-DORD_HANDOVER=RLX -DORD_SEEN=RLX|1 2 5"
    "row:seen-after-try-lock|pass|pass|-DSEEN_AFTER_TRY_LOCK|1 2 5"
)
if [ -n "$FULL" ]; then
    VARIANTS+=("${FULL_VARIANTS[@]}")
fi

unexpected=0
printf '%-42s %-5s %-8s %-8s %s\n' variant model verdict expected "time (GenMC's, per scenario)"
for variant in "${VARIANTS[@]}"; do
    IFS='|' read -r name exp_rc11 exp_imm flags scenarios <<<"$variant"
    [[ "$name" =~ ${VERIFY_VARIANTS:-.} ]] || continue
    read -r -a SCENARIOS <<<"$scenarios"
    for model in rc11 imm; do
        expected="$exp_rc11"
        [ "$model" = imm ] && expected="$exp_imm"
        verdict=pass
        times=()
        failure=""
        for scenario in "${SCENARIOS[@]}"; do
            # shellcheck disable=SC2086
            out="$(timeout "$LIMIT" "$GENMC" --"$model" --disable-mm-detector --disable-estimation \
                --disable-spin-assume --check-liveness --disable-load-annotation \
                --print-error-trace -- -DSCENARIO="$scenario" $flags handoff.c 2>&1)" || true
            t="$(grep -o 'Total wall-clock time: [0-9.]*s' <<<"$out" | awk '{print $4}')"
            times+=("s$scenario:${t:-?}")
            if grep -q 'No errors were detected' <<<"$out"; then
                :
            elif ! grep -q 'Verification unsuccessful' <<<"$out"; then
                # No verdict (compilation error, timeout): never counted as the expected fail.
                verdict=error
                [ -z "$failure" ] && failure="scenario $scenario: no verdict"$'\n'"$out"
            elif grep -q 'Liveness violation' <<<"$out"; then
                [ "$verdict" = error ] || [ "$verdict" = fail ] || verdict=live
                [ -z "$failure" ] && failure="scenario $scenario: $(grep -m1 -E 'Liveness violation|Non-terminating' <<<"$out")"$'\n'"$out"
            else
                [ "$verdict" = error ] || verdict=fail
                [ -z "$failure" ] && failure="scenario $scenario: $(grep -m1 -E 'Error|Assertion|violation|race' <<<"$out" || echo 'no verdict (timeout?)')"$'\n'"$out"
            fi
        done
        printf '%-42s %-5s %-8s %-8s %s\n' "$name" "$model" "$verdict" "$expected" "${times[*]}"
        if [ -z "$REPORT" ] && [ "$verdict" != "$expected" ]; then
            unexpected=1
            printf '  ^^^ UNEXPECTED: %s %s gave %s, expected %s\n' "$name" "$model" "$verdict" "$expected"
            if [ -n "$failure" ]; then
                # GenMC's counterexample: the error and the execution graph's first lines.
                printf '%s\n' "$failure" | head -60 | sed 's/^/      /'
                printf '%s\n' "$failure" | grep -E 'Assertion violation|Error:|race' | sed 's/^/      /'
            fi
        elif [ -n "$REPORT" ] && [ -n "$failure" ]; then
            printf '%s\n' "$failure" | grep -E '^scenario|Assertion violation|Non-terminating' | sed 's/^/      /'
        fi
    done
done
exit "$unexpected"
