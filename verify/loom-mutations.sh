#!/usr/bin/env bash
# Shows that each ordering docs/verification.md says loom checks is checked: every row below
# weakens one ordering (or moves one step) of the Rust code, in a scratch copy of HEAD, and
# runs the loom model that must then fail, with the message it must fail with. The
# unmutated code passes every model (.ci/verify.sh). By hand, not in CI: each row rebuilds
# the crate in release under loom (1 to 3 minutes on 2 cores).
#
#   verify/loom-mutations.sh [NAME_REGEX]
#
# Exit status: non-zero if a row's model passes (the ordering is not checked after all) or
# fails otherwise than expected. The tree under test is HEAD: commit first.
set -euo pipefail
cd "$(dirname "$0")/.."
FILTER="${1:-.}"
WORK="${LOOM_MUTATIONS_WORK:-/tmp/gpu-event-pool-loom-mutations}"
export CARGO_TERM_COLOR=never
mkdir -p "$WORK"
failures=0

# mutation NAME FILE OLD NEW ARGS EXPECTED: in a fresh copy of HEAD, replaces the text OLD
# (which must occur once in FILE) with NEW, runs `cargo test --release ARGS` under loom (a
# loom target or the library, with the feature the model needs, and the model's name; a `--`
# in ARGS starts the test binary's own arguments), and expects it to fail printing EXPECTED
# (a regex). EXPECTED `passes`: the mutation is redundant, and the model must pass.
mutation() {
    local name="$1" file="$2" old="$3" new="$4" args="$5" expected="$6"
    [[ "$name" =~ $FILTER ]] || return 0
    printf '\n=== %s (%s)\n' "$name" "$file"
    rm -rf "$WORK/src"
    mkdir -p "$WORK/src"
    git archive --format=tar HEAD | tar -x -C "$WORK/src"
    python3 -c '
import sys
path, old, new = sys.argv[1:]
text = open(path).read()
if text.count(old) != 1:
    sys.exit(f"{path}: the text to mutate occurs {text.count(old)} times, not once")
open(path, "w").write(text.replace(old, new))
' "$WORK/src/$file" "$old" "$new"
    local run=(--test-threads=1 --nocapture)
    [[ " $args " == *" -- "* ]] || run=(-- "${run[@]}")
    # shellcheck disable=SC2086
    if (cd "$WORK/src" && RUSTFLAGS="--cfg gpu_event_pool_loom" CARGO_TARGET_DIR="$WORK/target" \
        LOOM_MAX_PREEMPTIONS=2 cargo test --release $args "${run[@]}") >"$WORK/$name.log" 2>&1; then
        if [ "$expected" = passes ]; then
            printf 'passes, as expected (redundant): %s\n' "$(grep -E '^test .*loom:' "$WORK/$name.log" | head -n 3)"
        else
            printf 'NOT CAUGHT: %s passes its model\n' "$name"
            failures=$((failures + 1))
        fi
    elif [ "$expected" != passes ] && grep -Eq "$expected" "$WORK/$name.log"; then
        printf 'caught: %s\n' "$(grep -E 'loom: .*failed' "$WORK/$name.log" | head -n 1)"
        grep -Em 1 "$expected" "$WORK/$name.log" | cut -c1-200
    else
        printf 'FAILED OTHERWISE: %s (see %s)\n' "$name" "$WORK/$name.log"
        grep -E 'error(\[|:)|panicked|loom: ' "$WORK/$name.log" | head -n 6
        failures=$((failures + 1))
    fi
}

# The lane's place lock (shared/lanes/entry.rs): what the backend does under it for one list
# happens before what it does for the next (loom_lanes' stream keeps its openings in plain
# memory: an unordered pair is a data race).
mutation L1:place-lock-CAS-Relaxed src/shared/lanes/entry.rs \
"                Ordering::Acquire,
                Ordering::Relaxed,
            ) {" \
"                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {" \
    "--test loom_lanes lists_started_at_once_on_one_lane_are_emitted_in_gpu_order" "Causality violation"
mutation L2:take-place-store-Relaxed src/shared/lanes/entry.rs \
    "self.entry.next.store((seq + 1) << 1, Ordering::Release);" \
    "self.entry.next.store((seq + 1) << 1, Ordering::Relaxed);" \
    "--test loom_lanes lists_started_at_once_on_one_lane_are_emitted_in_gpu_order" "Causality violation"
mutation L3:unlock-on-drop-Relaxed src/shared/lanes/entry.rs \
    "self.entry.next.store(self.seq << 1, Ordering::Release);" \
    "self.entry.next.store(self.seq << 1, Ordering::Relaxed);" \
    "--test loom_lanes a_first_record_that_fails_takes_no_place_and_the_stream_goes_on" "Causality violation"
mutation L4:try-lock-CAS-Relaxed src/shared/lanes/entry.rs \
    ".compare_exchange(expected, expected | PLACE_LOCKED, Ordering::Acquire, Ordering::Relaxed)" \
    ".compare_exchange(expected, expected | PLACE_LOCKED, Ordering::Relaxed, Ordering::Relaxed)" \
    "--test loom_lanes a_stream_that_takes_over_an_idle_entry_keeps_every_stream_in_order" passes
mutation L5:first-record-outside-the-place-lock src/shared/lanes/mod.rs \
"        let (index, place) = self.lock_lane(lane);
        let out = record()?;" \
"        let out = record()?;
        let (index, place) = self.lock_lane(lane);" \
    "--test loom_lanes lists_started_at_once_on_one_lane_are_emitted_in_gpu_order" \
    "lane order is not|Causality violation"
mutation L6:first-level-claim-race-lost-taken src/shared/lanes/mod.rs \
    "Err(other) => other == key," \
    "Err(other) => other != key," \
    "--test loom_lanes lists_started_at_once_on_one_lane_are_emitted_in_gpu_order" \
    "lane order is not|panicked"
# The callback gate (backend/cupti/gate.rs): a callback racing the gate's opening.
mutation G4:gate-active-load-Relaxed src/backend/cupti/gate.rs \
    "let target = self.active.load(Ordering::Acquire);" \
    "let target = self.active.load(Ordering::Relaxed);" \
    "--features cupti --lib loom_gate::a_callback_racing_the_gate_opening_sees_the_state_as_made" "Causality violation"

# The record hand-off of the CUPTI source (backend/cupti/flush.rs), on RecordQueue::read.
mutation H1:records-taken-before-the-reading-lock src/backend/cupti/flush.rs \
"        let Some(mut reading) = self.handoff.begin_read(bounded) else { return };
        let offset = self.offset_ns.load(Relaxed);
        let mut batch = Vec::new();
        let mut incomplete = 0;
        let names = reading.state();
        let read = tracer.drain(|r| {" \
"        let mut taken = Vec::new();
        let read = tracer.drain(|r| taken.push(r));
        let Some(mut reading) = self.handoff.begin_read(bounded) else { return };
        let offset = self.offset_ns.load(Relaxed);
        let mut batch = Vec::new();
        let mut incomplete = 0;
        let names = reading.state();
        taken.into_iter().for_each(|r| {" \
    "--features cupti --lib loom_flush" "every completed record, once"
mutation H2:batch-queued-after-the-reading-lock src/backend/cupti/flush.rs \
    "        reading.queue(batch);" \
"        drop(reading);
        if let Some(again) = self.handoff.begin_read(false) {
            again.queue(batch);
        }" \
    "--features cupti --lib loom_flush" "every completed record, once"

# The lane table's other locks and words (shared/lanes/).
mutation K1:holders-lock-CAS-Relaxed src/shared/lanes/entry.rs \
    ".compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()" \
    ".compare_exchange(false, true, Ordering::Relaxed, Ordering::Relaxed)
            .ok()" \
    "--test loom_lanes lists_started_at_once_on_one_lane_are_emitted_in_gpu_order" "Causality violation"
mutation K2:holders-unlock-Relaxed src/shared/lanes/entry.rs \
    "self.entry.holders_locked.store(false, Ordering::Release);" \
    "self.entry.holders_locked.store(false, Ordering::Relaxed);" \
    "--test loom_lanes lists_started_at_once_on_one_lane_are_emitted_in_gpu_order" "Causality violation"
mutation K3:claiming-lock-CAS-Relaxed src/shared/lanes/entry.rs \
    "if self.claiming.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok() {" \
    "if self.claiming.compare_exchange(false, true, Ordering::Relaxed, Ordering::Relaxed).is_ok() {" \
    "--test loom_lanes two_lists_that_claim_an_entry_for_one_lane_at_once_share_it" "Causality violation"
mutation K4:settle-Relaxed src/shared/lanes/entry.rs \
    "self.done.fetch_add(n, Ordering::Release);" \
    "self.done.fetch_add(n, Ordering::Relaxed);" \
    "--test loom_lanes a_stream_that_takes_over_an_idle_entry_keeps_every_stream_in_order" passes
mutation K5:level-pointer-load-Relaxed src/shared/lanes/mod.rs \
    "let level = self.more.get(more)?.load(Ordering::Acquire);" \
    "let level = self.more.get(more)?.load(Ordering::Relaxed);" \
    "--test loom_lanes lanes_of_two_homes_claim_entries_of_a_new_level_at_once" "Causality violation"
mutation K6:level-pointer-CAS-Relaxed src/shared/lanes/mod.rs \
"            Ordering::AcqRel,
            Ordering::Acquire,
        ) {" \
"            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {" \
    "--test loom_lanes lanes_of_two_homes_claim_entries_of_a_new_level_at_once" "Causality violation"

# The freelist (slots/freelist.rs): the slots' payloads are loom cells.
mutation F1:push-CAS-Relaxed src/slots/freelist.rs \
    "match self.replace(head, chain.first, Ordering::Release, Ordering::Relaxed) {" \
    "match self.replace(head, chain.first, Ordering::Relaxed, Ordering::Relaxed) {" \
    "--test loom_freelist -- --skip blind" "panicked at"
mutation F2:pop-head-load-Relaxed src/slots/freelist.rs \
    "let mut head = Head(self.head.load(Ordering::Acquire));" \
    "let mut head = Head(self.head.load(Ordering::Relaxed));" \
    "--test loom_freelist -- --skip blind" "panicked at"
mutation F3:pop-CAS-Relaxed src/slots/freelist.rs \
    "match self.replace(head, next, Ordering::Acquire, Ordering::Acquire) {" \
    "match self.replace(head, next, Ordering::Relaxed, Ordering::Acquire) {" \
    "--test loom_freelist -- --skip blind" passes

# The submission, retry and read queues (slots/submit.rs): the head records are loom cells.
mutation Q1:queue-push-CAS-Relaxed src/slots/submit.rs \
    "match self.head.compare_exchange_weak(head, first, Ordering::Release, Ordering::Relaxed) {" \
    "match self.head.compare_exchange_weak(head, first, Ordering::Relaxed, Ordering::Relaxed) {" \
    "--test loom_submit" "Causality violation"
mutation Q2:queue-take-swap-Release src/slots/submit.rs \
    "let mut index = self.head.swap(NIL, Ordering::AcqRel);" \
    "let mut index = self.head.swap(NIL, Ordering::Release);" \
    "--test loom_submit" "Causality violation"

# A flush's mark and the passes (collect/mod.rs, invariant F of docs/design.md section 4).
mutation C1:queue-take-swap-Acquire src/slots/submit.rs \
    "let mut index = self.head.swap(NIL, Ordering::AcqRel);" \
    "let mut index = self.head.swap(NIL, Ordering::Acquire);" \
    "--test loom_collector concurrent_flushes_each_return_after_their_own_list_arrived" "flush returned before"
mutation C2:mark-Release src/slots/submit.rs \
    "self.head.fetch_or(0, Ordering::AcqRel);" \
    "self.head.fetch_or(0, Ordering::Release);" \
    "--test loom_collector concurrent_flushes_each_return_after_their_own_list_arrived" "flush returned before"
mutation C3:passes-load-Relaxed src/collect/mod.rs \
    "self.passes.load(Ordering::Acquire)" \
    "self.passes.load(Ordering::Relaxed)" \
    "--test loom_collector concurrent_flushes_each_return_after_their_own_list_arrived" passes

# The pool's growth (slots/pool.rs).
mutation P1:growing-CAS-Relaxed src/slots/pool.rs \
    "if self.growing.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {" \
    "if self.growing.compare_exchange(false, true, Ordering::Relaxed, Ordering::Relaxed).is_err() {" \
    "--test loom_lifecycle exhausted_pool_drops_zones_cleanly_and_recovers" "panicked at"
mutation P2:growing-unlock-Relaxed src/slots/pool.rs \
    "self.0.store(false, Ordering::Release);" \
    "self.0.store(false, Ordering::Relaxed);" \
    "--test loom_lifecycle exhausted_pool_drops_zones_cleanly_and_recovers" "panicked at"

# The magazines (slots/magazine/free_slots.rs).
mutation M1:claimed-CAS-Relaxed src/slots/magazine/free_slots.rs \
    ".compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)" \
    ".compare_exchange(false, true, Ordering::Relaxed, Ordering::Relaxed)" \
    "--test loom_magazine a_magazine_record_passes_from_an_exiting_thread_to_the_next_with_its_slots_returned" \
    "Causality violation"
mutation M2:claimed-store-Relaxed src/slots/magazine/free_slots.rs \
    "magazine.claimed.store(false, Ordering::Release);" \
    "magazine.claimed.store(false, Ordering::Relaxed);" \
    "--test loom_magazine a_magazine_record_passes_from_an_exiting_thread_to_the_next_with_its_slots_returned" \
    "Causality violation"
mutation M3:magazine-publish-CAS-Relaxed src/slots/magazine/free_slots.rs \
    "match self.magazines.compare_exchange_weak(head, fresh, Ordering::Release, Ordering::Relaxed) {" \
    "match self.magazines.compare_exchange_weak(head, fresh, Ordering::Relaxed, Ordering::Relaxed) {" \
    "--test loom_magazine" "panicked at"

# The callback gate (backend/cupti/gate.rs): a callback racing the gate's closing. A
# callback that reads the state after its free reads loom's handle of the cell from freed
# memory: loom then fails on the index it finds there ("index out of bounds").
mutation G1:gate-close-waits-with-a-load src/backend/cupti/gate.rs \
    "while self.in_callback.fetch_add(0, Ordering::SeqCst) != 0 {" \
    "while self.in_callback.load(Ordering::SeqCst) != 0 {" \
    "--features cupti --lib loom_gate::a_callback_racing_the_gate_closing_never_touches_freed_state" \
    "Causality violation|index out of bounds"
mutation G2:gate-leave-Relaxed src/backend/cupti/gate.rs \
    "self.0.fetch_sub(1, Ordering::SeqCst);" \
    "self.0.fetch_sub(1, Ordering::Relaxed);" \
    "--features cupti --lib loom_gate::a_callback_racing_the_gate_closing_never_touches_freed_state" "Causality violation"
mutation G3:gate-enter-Relaxed src/backend/cupti/gate.rs \
    "self.in_callback.fetch_add(1, Ordering::SeqCst);" \
    "self.in_callback.fetch_add(1, Ordering::Relaxed);" \
    "--features cupti --lib loom_gate::a_callback_racing_the_gate_closing_never_touches_freed_state" \
    "Causality violation|index out of bounds"
mutation G5:gate-open-Relaxed src/backend/cupti/gate.rs \
    "self.active.store(target, Ordering::SeqCst);" \
    "self.active.store(target, Ordering::Relaxed);" \
    "--features cupti --lib loom_gate::a_callback_racing_the_gate_opening_sees_the_state_as_made" "Causality violation"

# The handle count (context/handle.rs): loom's RMWs read the newest value (an argument,
# docs/verification.md, "Two orderings loom cannot see").
mutation A1:handle-count-Relaxed src/context/handle.rs \
    "if self.shared.count.fetch_sub(1, Ordering::AcqRel) == 1 {" \
    "if self.shared.count.fetch_sub(1, Ordering::Relaxed) == 1 {" \
    "--test loom_collector last_handle_dropped_while_another_thread_holds_a_list" passes

rm -rf "$WORK/src"
[ "$failures" -eq 0 ]
