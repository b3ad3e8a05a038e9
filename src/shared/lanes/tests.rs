use super::*;

fn holder(list_id: u64) -> Holder {
    Holder { list_id, lane: Lane::Stream(9), location: crate::location!("first zone").into(), started_ns: 7 }
}

/// Takes the next place of `lane` for a list whose first record succeeds.
fn take(table: &LaneTable, lane: Lane) -> LaneSeq {
    table.record_first(lane, || Ok::<_, ()>(()), || holder(0)).unwrap().0
}

#[test]
fn each_lane_counts_its_own_lists_from_zero() {
    let table = LaneTable::new();
    let (a, b) = (Lane::Stream(1), Lane::Stream(2));
    assert_eq!(take(&table, a).seq, 0);
    assert_eq!(take(&table, a).seq, 1);
    assert_eq!(take(&table, b).seq, 0);
    assert_eq!(take(&table, a).seq, 2);
    assert_ne!(take(&table, a).entry, take(&table, b).entry);
    assert_ne!(take(&table, Lane::Graph(1)).entry, take(&table, a).entry, "kinds are distinct lanes");
}

/// The collector is done with `place` (its list emitted).
fn settle(table: &LaneTable, place: LaneSeq) {
    table.settle(place.entry, 1);
}

/// Levels made.
fn levels(table: &LaneTable) -> usize {
    (0..LEVELS).take_while(|&k| table.level(k).is_some()).count()
}

#[test]
fn lanes_in_use_at_once_each_have_an_entry_of_their_own() {
    let table = LaneTable::new();
    // (Under Miri one more lane than the first level has entries, so that the next level must
    // be made; four times as many elsewhere.)
    let lanes = if cfg!(miri) { FIRST_LEVEL as u64 + 1 } else { 4 * FIRST_LEVEL as u64 };
    let mut entries: Vec<u32> = (0..lanes).map(|k| take(&table, Lane::Graph(k)).entry).collect();
    assert!(levels(&table) > 1, "past the first level's windows, the next level is made");
    entries.sort_unstable();
    entries.dedup();
    assert_eq!(entries.len() as u64, lanes, "no two lanes in use share an entry");
    for k in 0..lanes {
        let again = take(&table, Lane::Graph(k));
        assert_eq!(again.seq, 1, "each lane found its own entry again");
    }
}

#[test]
fn entries_of_lanes_done_serve_new_lanes_and_count_on() {
    let table = LaneTable::new();
    let mut last_seq_of_entry = std::collections::HashMap::new();
    // Under Miri 300: entries of lanes done are taken over all the same (64 windows).
    for k in 0..if cfg!(miri) { 300 } else { 100_000u64 } {
        let place = take(&table, Lane::Stream(k));
        if let Some(before) = last_seq_of_entry.insert(place.entry, place.seq) {
            assert_eq!(place.seq, before + 1, "an entry's places go on from one lane to the next");
        }
        table.release(place);
        settle(&table, place);
    }
    assert_eq!(levels(&table), 1, "lanes one after another fit the first level");
}

#[test]
#[cfg_attr(
    miri,
    ignore = "about a thousand lanes until one takes the entry over: a quarter of an hour under Miri"
)]
fn a_lane_whose_entry_went_to_another_lane_takes_a_new_one() {
    let table = LaneTable::new();
    // Lanes one after another until one takes over the entry of an earlier one.
    let first = take(&table, Lane::Stream(0));
    settle(&table, first);
    let mut k = 1;
    let taker = loop {
        let place = take(&table, Lane::Stream(k));
        if place.entry == first.entry {
            break place;
        }
        settle(&table, place);
        k += 1;
    };
    assert_eq!(taker.seq, first.seq + 1);
    // The first lane is back while the taker still holds its place: an entry of its own.
    let back = take(&table, Lane::Stream(0));
    assert_ne!(back.entry, first.entry, "the entry serves the taker now");
    assert_eq!(table.holder(taker).map(|h| h.list_id), Some(0));
}

/// A list's first record holds its lane's place lock for the whole backend call: a first
/// record on any other lane, among 100,000 that come and go, never waits for it.
#[test]
fn a_first_record_never_waits_for_another_lanes_backend_call() {
    let table = LaneTable::new();
    let (recording, recording_rx) = std::sync::mpsc::channel();
    let (done, done_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let table = &table;
        let held = s.spawn(move || {
            table.record_first(
                Lane::Stream(u64::MAX),
                || {
                    recording.send(()).unwrap();
                    // Far longer than the lanes below take, under Miri too.
                    let patience = std::time::Duration::from_secs(if cfg!(miri) { 1_800 } else { 5 });
                    done_rx.recv_timeout(patience).map_err(|_| "waited for")
                },
                || holder(1),
            )
        });
        recording_rx.recv().unwrap();
        for k in 0..if cfg!(miri) { 300 } else { 100_000u64 } {
            let place = take(table, Lane::Stream(k));
            table.release(place);
            settle(table, place);
        }
        done.send(()).unwrap();
        held.join().unwrap().expect("the held record was let go, not waited for");
    });
}

#[test]
fn concurrent_lists_on_one_lane_get_distinct_gapless_numbers() {
    let table = LaneTable::new();
    // 500 lists a thread; 50 under Miri (500 took two minutes there).
    const LISTS: u64 = if cfg!(miri) { 50 } else { 500 };
    let mut seqs: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    (0..LISTS)
                        .map(|_| {
                            let place = take(&table, Lane::Stream(3));
                            table.release(place);
                            place.seq
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    seqs.sort_unstable();
    assert_eq!(seqs, (0..4 * LISTS).collect::<Vec<_>>());
    let entry = take(&table, Lane::Stream(3)).entry as usize;
    let holders = table.get(entry as u32).unwrap().lock_holders().with(|h| h.len());
    assert_eq!(holders, 1, "released places hold nothing; the last still does");
}

#[test]
fn a_failed_or_panicking_first_record_takes_no_place_and_unlocks() {
    let table = LaneTable::new();
    let lane = Lane::Stream(5);
    assert_eq!(table.record_first(lane, || Err::<(), _>("failed"), || holder(1)).unwrap_err(), "failed");
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        table.record_first(lane, || -> Result<(), ()> { panic!("boom") }, || holder(2))
    }));
    assert!(unwound.is_err());
    let place = take(&table, lane);
    assert_eq!(place.seq, 0, "neither took a place, and the lane is not left locked");
    assert!(table.holder(LaneSeq { entry: place.entry, seq: 1 }).is_none(), "not taken yet");
}

#[test]
fn a_place_is_held_by_its_list_until_released() {
    let table = LaneTable::new();
    let lane = Lane::Stream(9);
    let (first, ()) = table.record_first(lane, || Ok::<_, ()>(()), || holder(41)).unwrap();
    let (second, ()) = table.record_first(lane, || Ok::<_, ()>(()), || holder(42)).unwrap();
    let held = table.holder(first).expect("held while being recorded");
    assert_eq!((held.list_id, held.location.name(), held.started_ns), (41, "first zone", 7));
    assert_eq!(table.holder(second).map(|h| h.list_id), Some(42));
    table.release(first);
    assert!(table.holder(first).is_none(), "submitted or dropped: no longer held");
    assert_eq!(table.holder(second).map(|h| h.list_id), Some(42), "the others stay");
    table.release(second);
    assert!(table.holder(second).is_none());
}

#[test]
fn try_holder_answers_unless_a_recorder_changes_the_holders_now() {
    let table = LaneTable::new();
    let lane = Lane::Stream(9);
    let (place, ()) = table.record_first(lane, || Ok::<_, ()>(()), || holder(41)).unwrap();
    assert_eq!(table.try_holder(place).map(|h| h.map(|h| h.list_id)), Some(Some(41)));
    let busy = table.get(place.entry).unwrap().lock_holders();
    assert!(table.try_holder(place).is_none(), "the holders are locked: no answer, no wait");
    drop(busy);
    let first_record = table.get(place.entry).unwrap().lock_place();
    assert_eq!(
        table.try_holder(place).map(|h| h.map(|h| h.list_id)),
        Some(Some(41)),
        "a first record under way does not keep the collector from an answer"
    );
    drop(first_record);
    table.release(place);
    assert_eq!(table.try_holder(place).map(|h| h.is_some()), Some(false), "handed to the collector");
}

/// A list's first record holds its lane's place lock for the whole backend call: a list
/// of that lane submitted or dropped meanwhile gives its place up without waiting for it.
/// The record waits for the release (up to a patience that a release waiting for the
/// record would use up).
#[test]
fn a_release_does_not_wait_for_a_first_record_under_way_on_its_lane() {
    let table = LaneTable::new();
    let lane = Lane::Stream(4);
    let (earlier, ()) = table.record_first(lane, || Ok::<_, ()>(()), || holder(1)).unwrap();
    let (recording, recording_rx) = std::sync::mpsc::channel();
    let (released, released_rx) = std::sync::mpsc::channel::<()>();
    let later = std::thread::scope(|s| {
        let table = &table;
        let later = s.spawn(move || {
            table.record_first(
                lane,
                || {
                    recording.send(()).unwrap();
                    released_rx.recv_timeout(std::time::Duration::from_secs(5)).map_err(|_| "waited")
                },
                || holder(2),
            )
        });
        recording_rx.recv().unwrap();
        table.release(earlier);
        released.send(()).unwrap();
        later.join().unwrap()
    });
    let (later, ()) = later.expect("the release returned while the first record was in its call");
    assert!(table.holder(earlier).is_none());
    assert_eq!((later.seq, table.holder(later).map(|h| h.list_id)), (1, Some(2)));
}

/// Every probe of a key's window stays in its level, wrapping from the level's end to its
/// start: a window that strayed into the next level, or past the table, would share entries
/// across levels or index out of the table.
#[test]
fn every_window_lies_in_its_level_and_wraps_at_its_end() {
    for k in [0, 1, LEVELS - 1] {
        let (len, start) = level_span(k);
        for home in [0, 1, len / 2, len - PROBES, len - 1] {
            let probes: Vec<usize> = window(home as u64, k).collect();
            assert_eq!(probes.len(), PROBES.min(len));
            assert!(
                probes.iter().all(|&i| (start..start + len).contains(&i)),
                "level {k}, home {home}: {probes:?}"
            );
            assert_eq!(probes[0], start + home, "level {k}: the window starts at its home");
            let wrapped = (home + 1) % len;
            assert_eq!(probes[1], start + wrapped, "level {k}, home {home}: then the next entry, wrapping");
        }
    }
}

/// An entry's index names it in every level: `get` finds, for each index of a level made, the
/// entry at that place of the level.
#[test]
fn get_finds_each_index_in_its_level() {
    let table = LaneTable::new();
    for k in 0..3 {
        let level = table.make_level(k);
        let (len, start) = level_span(k);
        for offset in [0, 1, len / 2, len - 1] {
            let entry = table.get((start + offset) as u32).expect("made");
            assert!(std::ptr::eq(entry, &level[offset]), "level {k}, entry {offset}");
        }
    }
    let (_, start) = level_span(3);
    assert!(table.get(start as u32).is_none(), "level 3 is not made");
}

/// Keys of one home in every level (the same low bits): a window of the first level holds
/// `PROBES` of them, and the next one goes on to a later level.
fn same_home(n: u64) -> u64 {
    (n << 32) | 5
}

/// Fills the first-level window of home 5 with lanes that each hold a place (busy: not idle).
fn fill_home_window(table: &LaneTable) -> Vec<u32> {
    (1..=PROBES as u64)
        .map(|n| {
            let (index, entry) = table.first_level(same_home(n)).expect("the window has room");
            assert_eq!(entry.key.load(Ordering::Relaxed), same_home(n), "claimed with its CAS");
            entry.try_lock_place().expect("free").take_place();
            index
        })
        .collect()
}

/// The lookups and the claim, one step at a time and from one thread: a lane that claims a
/// first-level entry is found there again, a lane claimed into a later level is found there,
/// a claim prefers an unused entry to an idle one and takes an idle one over before making a
/// level. None of these steps waits, so a lookup that misses its own entry fails here at once
/// (the table's other tests would look again for ever).
#[test]
fn a_lane_is_found_again_where_it_was_claimed() {
    let table = LaneTable::new();
    let first = fill_home_window(&table);
    assert_eq!(first, (5..5 + PROBES as u32).collect::<Vec<_>>(), "the window from its home on");
    for (n, &index) in (1..=PROBES as u64).zip(&first) {
        assert_eq!(table.first_level(same_home(n)).map(|(i, _)| i), Some(index));
    }
    let outside = same_home(PROBES as u64 + 1);
    assert!(table.first_level(outside).is_none(), "the window is full of busy lanes");
    assert!(table.later_levels(outside).is_none(), "no later level yet");
    let (index, locked) = table.claim(outside);
    let (_, start) = level_span(1);
    assert_eq!(index as usize, start + 5, "the first unused entry of its window in level 1");
    assert_eq!(locked.take_place(), 0);
    assert_eq!(table.later_levels(outside).map(|(i, _)| i), Some(index), "found where claimed");
    assert!(std::ptr::eq(table.later_levels(outside).unwrap().1, table.get(index).unwrap()));
}

#[test]
fn a_claim_takes_an_unused_entry_before_an_idle_one() {
    let table = LaneTable::new();
    fill_home_window(&table);
    let level = table.make_level(1);
    let (_, start) = level_span(1);
    // The home entry of level 1 served a lane before and is idle now.
    level[5].key.store(same_home(99), Ordering::Relaxed);
    let (index, _locked) = table.claim(same_home(PROBES as u64 + 1));
    assert_eq!(index as usize, start + 6, "the next entry, unused, not the idle home");
}

#[test]
fn a_claim_takes_an_idle_entry_over_before_making_a_level() {
    let table = LaneTable::new();
    let first = fill_home_window(&table);
    table.settle(first[3], 1);
    let (index, locked) = table.claim(same_home(PROBES as u64 + 1));
    assert_eq!(index, first[3], "the one idle entry of the full window");
    assert_eq!(locked.take_place(), 1, "its places go on counting");
    assert_eq!(levels(&table), 1, "no level made");
}
