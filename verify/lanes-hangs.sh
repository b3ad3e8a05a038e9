#!/usr/bin/env bash
# Shows that every mutant of the lane table that the full mutation run (.ci/mutants.sh, group
# `lanes`) reports only as a timeout fails a test at once: each is run against the one test
# written for it (src/shared/lanes/{entry.rs,tests.rs}: steps from one thread that never
# wait), in a scratch copy of HEAD. The full run still reports these as timeouts, because
# other tests of its set (threads that wait on a lock, a lookup that looks again) spin on the
# same fault meanwhile and the test binary ends only when every test has. By hand, not in CI
# (a few seconds a mutant); writes verify/mutants/lanes/hangs.txt, which
# .cargo/mutants-equivalent.txt cites.
#
#   verify/lanes-hangs.sh
#
# Exit status: non-zero if a mutant below is not caught by its test.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK="${LANES_HANGS_WORK:-/tmp/gpu-event-pool-lanes-hangs}"
export CARGO_TERM_COLOR=never
commit="$(git rev-parse HEAD)"
rm -rf "$WORK/src" "$WORK/out"
mkdir -p "$WORK/src"
git archive --format=tar HEAD | tar -x -C "$WORK/src"

# test | the mutants (cargo-mutants names without line and column, `;`-separated)
ROWS=(
    "shared::lanes::entry::tests::places_are_taken_in_order_and_a_lock_not_used_takes_none|src/shared/lanes/entry.rs: replace & with | in Entry::try_lock_place;src/shared/lanes/entry.rs: delete ! in Entry::try_lock_place;src/shared/lanes/entry.rs: replace >> with << in Entry::try_lock_place;src/shared/lanes/entry.rs: replace PlaceLocked<'_>::take_place -> u64 with 0;src/shared/lanes/entry.rs: replace PlaceLocked<'_>::take_place -> u64 with 1;src/shared/lanes/entry.rs: replace + with * in PlaceLocked<'_>::take_place;src/shared/lanes/entry.rs: replace << with >> in PlaceLocked<'_>::take_place;src/shared/lanes/entry.rs: replace <impl Drop for PlaceLocked<'_>>::drop with ()"
    "shared::lanes::entry::tests::an_entry_is_idle_once_every_place_taken_is_settled|src/shared/lanes/entry.rs: replace Entry::settle with ();src/shared/lanes/entry.rs: replace PlaceLocked<'_>::idle -> bool with false"
    "shared::lanes::entry::tests::the_place_lock_of_a_lane_is_had_only_while_the_entry_serves_it|src/shared/lanes/entry.rs: replace Entry::lock_place_of -> Option<PlaceLocked<'_>> with None;src/shared/lanes/entry.rs: replace == with != in Entry::lock_place_of"
    "shared::lanes::entry::tests::the_holders_and_claiming_locks_are_given_back_on_drop|src/shared/lanes/entry.rs: replace <impl Drop for HoldersLocked<'_>>::drop with ();src/shared/lanes/entry.rs: replace <impl Drop for Claiming<'_>>::drop with ();src/shared/lanes/entry.rs: replace Entry::try_lock_holders -> Option<HoldersLocked<'_>> with None"
    "shared::lanes::entry::tests::a_waiter_takes_the_place_lock_once_it_is_given_back|src/shared/lanes/entry.rs: replace Entry::lock_place_while -> Option<PlaceLocked<'_>> with None;src/shared/lanes/entry.rs: replace & with ^ in Entry::lock_place_while;src/shared/lanes/entry.rs: replace & with | in Entry::lock_place_while"
    "shared::lanes::tests::every_window_lies_in_its_level_and_wraps_at_its_end|src/shared/lanes/mod.rs: replace & with | in window;src/shared/lanes/mod.rs: replace - with + in window"
    "shared::lanes::tests::get_finds_each_index_in_its_level|src/shared/lanes/mod.rs: replace / with * in LaneTable::get;src/shared/lanes/mod.rs: replace LaneTable::get -> Option<&Entry> with None"
    "shared::lanes::tests::a_lane_is_found_again_where_it_was_claimed|src/shared/lanes/mod.rs: replace == with != in LaneTable::first_level;src/shared/lanes/mod.rs: replace && with || in LaneTable::first_level;src/shared/lanes/mod.rs: replace == with != in LaneTable::later_levels;src/shared/lanes/mod.rs: replace - with / in LaneTable::later_levels"
    "shared::lanes::tests::a_claim_takes_an_unused_entry_before_an_idle_one|src/shared/lanes/mod.rs: replace == with != in LaneTable::claim"
    "shared::lanes::tests::a_claim_takes_an_idle_entry_over_before_making_a_level|src/shared/lanes/mod.rs: replace != with == in LaneTable::claim;src/shared/lanes/mod.rs: replace LaneTable::settle with ()"
)

# Each timeout of the last full run, by its line and column (the lane table's lines have not
# moved since that run: a mutant not found at HEAD counts as not caught, so a move shows).
failures=0
{
    printf 'each lane-table timeout of the last full run, against the test written for it, at %s\n' "$commit"
    printf '(verify/lanes-hangs.sh; CAUGHT: the test fails at once under the mutant)\n\n'
} >"$WORK/hangs.txt"
while IFS= read -r placed; do
    [ -n "$placed" ] || continue
    unplaced="$(printf '%s\n' "$placed" | sed -E 's/^([^:]+):[0-9]+:[0-9]+: /\1: /')"
    test_name=""
    for row in "${ROWS[@]}"; do
        IFS=';' read -r -a names <<<"${row#*|}"
        for name in "${names[@]}"; do
            [ "$name" = "$unplaced" ] && test_name="${row%%|*}"
        done
    done
    if [ -z "$test_name" ]; then
        printf '%-10s %s  (no test named for it above)\n' NOT-CAUGHT "$placed" >>"$WORK/hangs.txt"
        failures=$((failures + 1))
        continue
    fi
    re="^$(printf '%s' "$placed" | python3 -c 'import re, sys; print(re.escape(sys.stdin.read()))')\$"
    rm -rf "$WORK/out"
    (cd "$WORK/src" && CARGO_TARGET_DIR="$WORK/target" cargo mutants --in-place --baseline=skip \
        --timeout 120 --re "$re" -o "$WORK/out" --cargo-arg=--lib -- -- "$test_name" --exact \
        >/dev/null 2>&1) || true
    if grep -qxF "$placed" "$WORK/out/mutants.out/caught.txt" 2>/dev/null; then
        verdict=CAUGHT
    else
        verdict=NOT-CAUGHT
        failures=$((failures + 1))
    fi
    printf '%-10s %s  by %s\n' "$verdict" "$placed" "${test_name##*::}" >>"$WORK/hangs.txt"
done <verify/mutants/lanes/timeout.txt
cp "$WORK/hangs.txt" verify/mutants/lanes/hangs.txt
cat verify/mutants/lanes/hangs.txt
[ "$failures" = 0 ]
