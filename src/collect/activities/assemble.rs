//! From lists, work records and launch links to batches of zones, in each lane's GPU order
//! (docs/design.md, section 13). No backend call here: the emitter feeds it, so every rule is
//! tested without a GPU (`activity/tests.rs`).
//!
//! - Each work record goes to its lane (its stream), kept in start order, which is the
//!   stream's order (CUPTI may hand buffers over out of order: it holds a buffer back until
//!   every record in it is complete). Its owner is the zone its launch was linked to.
//! - A list is emitted as one batch once every launch linked to its zones has had a record,
//!   or, once the hold limit has passed since it was taken, with what arrived
//!   (`lists_partial`). The batch holds its zones that had work, each spanning its work on
//!   its own lane and its children's spans, and that work as their children.
//! - A lane's front (its earliest record not emitted) waits for its owner's list; for a list
//!   still being recorded, at most the hold limit from when the record came (then it goes out
//!   alone: `lanes_released`); and for the record of an earlier linked launch, which may be
//!   this lane's in a buffer held back, at most the hold limit from the link. A record with no
//!   owner, or whose zone is on another lane, goes out alone at depth 0.
//! - Correlation ids are 32 bits and wrap: each is extended to 64 bits as the value nearest
//!   the newest seen (serial number arithmetic), since the ids in flight at once are far
//!   fewer than 2^31.

use crate::backend::activity::{Activity, Link, ZoneKey};
use crate::backend::Lane;
use crate::collect::deliver::HeldLane;
use crate::launch::Launch;
use crate::location::Location;
use crate::sink::Zone;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// A zone of a taken list, as its records say.
#[derive(Debug, Clone)]
pub(crate) struct UserZone {
    /// The position of its begin event in its list (its key's).
    pub(crate) position: u32,
    /// The index (in its list's zones) of the zone it is nested in.
    pub(crate) parent: Option<usize>,
    pub(crate) depth: u32,
    pub(crate) location: Location,
    /// Its stream's lane key.
    pub(crate) lane: u64,
    pub(crate) launch: Option<Launch>,
}

/// A list as the emitter took it off the submission queue.
#[derive(Debug)]
pub(crate) struct TakenList {
    pub(crate) id: u64,
    pub(crate) frame: Option<u64>,
    /// Its zones, in the order they began.
    pub(crate) zones: Vec<UserZone>,
    /// Dropped unsubmitted: its zones are not emitted, its work goes out alone.
    pub(crate) discarded: bool,
}

/// What one pass emitted.
#[derive(Debug, Default)]
pub(crate) struct Emitted {
    /// (list id, 0 for work outside any list; frame; zones in begin order) per batch, lanes
    /// in key order, each lane in its order.
    pub(crate) batches: Vec<(u64, Vec<Zone>)>,
    /// Lists emitted.
    pub(crate) lists: usize,
    pub(crate) user_zones: usize,
    pub(crate) activities: usize,
    pub(crate) empty_zones: usize,
    /// Lists emitted after the hold limit without a record of every linked launch.
    pub(crate) lists_partial: usize,
    /// Batches that began before the end of a batch their lane had already emitted.
    pub(crate) late: usize,
    pub(crate) held: Vec<HeldLane>,
}

/// A work record waiting on its lane, on the host clock.
#[derive(Debug)]
struct Work {
    correlation: u64,
    owner: Option<ZoneKey>,
    begin: i64,
    end: i64,
    location: Location,
    /// When the collector read it.
    seen: i64,
}

#[derive(Debug)]
struct LinkState {
    zone: ZoneKey,
    /// The launch this id belongs to: its own id, or the id of the call it was made inside.
    head: u64,
    /// (group heads only) whether a record of the launch arrived.
    arrived: bool,
}

#[derive(Debug)]
struct ListState {
    /// Its zones, once the list is taken.
    taken: Option<Taken>,
    /// Correlation ids linked to its zones (launch heads and the calls made inside them).
    correlations: Vec<u64>,
    /// Launches linked, and those with a record.
    launches: u32,
    arrived: u32,
    /// Lanes where its work was queued, and how many of its records wait there.
    lanes: Vec<u64>,
    waiting: u32,
    /// When the collector first heard of it.
    seen: i64,
    /// Its lane was released past it (reported once).
    reported: bool,
    /// Zones whose work went out alone while the list was being recorded (the hold limit),
    /// by position, with the span of that work: each zone still spans it when the list comes.
    released: Vec<(u32, i64, i64)>,
}

#[derive(Debug)]
struct Taken {
    frame: Option<u64>,
    zones: Vec<UserZone>,
    at: i64,
}

impl ListState {
    fn new(seen: i64) -> Self {
        Self {
            taken: None,
            correlations: Vec::new(),
            launches: 0,
            arrived: 0,
            lanes: Vec::new(),
            waiting: 0,
            seen,
            reported: false,
            released: Vec::new(),
        }
    }

    /// Work of its zone at `position`, from `begin` to `end`, went out alone.
    fn release(&mut self, position: u32, begin: i64, end: i64) {
        match self.released.iter_mut().find(|(at, _, _)| *at == position) {
            Some((_, b, e)) => (*b, *e) = ((*b).min(begin), (*e).max(end)),
            None => self.released.push((position, begin, end)),
        }
    }
}

#[derive(Debug)]
pub(crate) struct Assembler {
    /// The context whose zones this assembles (links to another's are not its own).
    context: u32,
    lists: HashMap<u64, ListState>,
    /// Extended correlation id -> link, until its list is emitted or the hold passes.
    links: HashMap<u64, LinkState>,
    lanes: BTreeMap<u64, VecDeque<Work>>,
    /// Launch heads linked with no record yet, and when they were linked.
    unarrived: BTreeMap<u64, i64>,
    /// The newest extended correlation id seen.
    newest: Option<u64>,
    /// The latest end each lane has emitted (host clock), to count late batches.
    emitted_until: HashMap<u64, i64>,
    /// The host time of GPU time 0 (the context's base).
    base_host_ns: i64,
}

impl Assembler {
    pub(crate) fn new(context: u32, base_host_ns: i64) -> Self {
        Self {
            context,
            lists: HashMap::new(),
            links: HashMap::new(),
            lanes: BTreeMap::new(),
            unarrived: BTreeMap::new(),
            newest: None,
            emitted_until: HashMap::new(),
            base_host_ns,
        }
    }

    /// Records held, and lists known but not emitted.
    pub(crate) fn pending(&self) -> (usize, usize) {
        (self.lanes.values().map(VecDeque::len).sum(), self.lists.len())
    }

    /// Launch links kept.
    #[cfg(all(test, not(gpu_event_pool_loom)))]
    pub(crate) fn links(&self) -> usize {
        self.links.len()
    }

    /// Taken lists still waiting for a record of one of their launches.
    pub(crate) fn lists_waiting(&self) -> usize {
        self.lists.values().filter(|l| l.taken.is_some() && l.arrived < l.launches).count()
    }

    /// `raw` extended to 64 bits: the value nearest the newest id seen.
    fn extend(&mut self, raw: u32) -> u64 {
        const SPAN: u64 = 1 << 32;
        let value = match self.newest {
            // Start one wrap up, so that an id just below the first is still below it.
            None => SPAN + u64::from(raw),
            Some(newest) => {
                let here = (newest & !(SPAN - 1)) | u64::from(raw);
                [here.wrapping_sub(SPAN), here, here + SPAN]
                    .into_iter()
                    .min_by_key(|v| v.abs_diff(newest))
                    .unwrap_or(here)
            }
        };
        self.newest = Some(self.newest.map_or(value, |n| n.max(value)));
        value
    }

    fn list(&mut self, id: u64, now: i64) -> &mut ListState {
        self.lists.entry(id).or_insert_with(|| ListState::new(now))
    }

    /// Links read at `now`, in the order they were made.
    pub(crate) fn link(&mut self, links: impl IntoIterator<Item = Link>, now: i64) {
        for link in links {
            let correlation = self.extend(link.correlation);
            let outer = link.outer.map(|o| self.extend(o));
            let Some(zone) = link.zone else {
                self.untie(correlation);
                continue;
            };
            if zone.context != self.context || self.links.contains_key(&correlation) {
                // Another context's, or a call linked already (the same id called back for
                // twice): one launch, counted once.
                continue;
            }
            // Made inside a call that is linked too: one launch, counted once.
            let head =
                outer.filter(|o| self.links.get(o).is_some_and(|l| l.head == *o)).unwrap_or(correlation);
            let list = self.list(zone.list, now);
            list.correlations.push(correlation);
            if head == correlation {
                list.launches += 1;
                self.unarrived.insert(correlation, now);
            }
            self.links.insert(correlation, LinkState { zone, head, arrived: false });
        }
    }

    /// A call that failed launched nothing: its link goes, unless a record came for it.
    fn untie(&mut self, correlation: u64) {
        let Some(link) = self.links.get(&correlation) else { return };
        if link.head != correlation || link.arrived {
            return;
        }
        let list = link.zone.list;
        self.links.remove(&correlation);
        self.unarrived.remove(&correlation);
        if let Some(list) = self.lists.get_mut(&list) {
            list.launches -= 1;
            list.correlations.retain(|&c| c != correlation);
        }
    }

    /// Lists taken off the submission queue at `now`, after the links read with them.
    pub(crate) fn take(&mut self, lists: impl IntoIterator<Item = TakenList>, now: i64) {
        for taken in lists {
            if taken.discarded {
                // Its zones are never emitted: its work goes out alone.
                self.forget(taken.id);
                continue;
            }
            let list = self.list(taken.id, now);
            list.taken = Some(Taken { frame: taken.frame, zones: taken.zones, at: now });
        }
    }

    /// Work records read at `now`.
    pub(crate) fn records(&mut self, records: impl IntoIterator<Item = Activity>, now: i64) {
        for r in records {
            let correlation = self.extend(r.correlation);
            let owner = self.links.get(&correlation).map(|link| (link.zone, link.head));
            if let Some((zone, head)) = owner {
                // The launch's first record: it has arrived (a graph launch gives several).
                let first =
                    self.links.get_mut(&head).is_some_and(|h| !std::mem::replace(&mut h.arrived, true));
                if first {
                    self.unarrived.remove(&head);
                }
                if let Some(list) = self.lists.get_mut(&zone.list) {
                    list.arrived += u32::from(first);
                    list.waiting += 1;
                    if !list.lanes.contains(&r.lane) {
                        list.lanes.push(r.lane);
                    }
                }
            }
            let owner = owner.map(|(zone, _)| zone);
            let lane = self.lanes.entry(r.lane).or_default();
            let (begin, end) = (r.begin_ns, r.end_ns.max(r.begin_ns));
            // In start order: mostly at the back.
            let at = lane.len()
                - lane.iter().rev().take_while(|w| (w.begin, w.correlation) > (begin, correlation)).count();
            lane.insert(at, Work { correlation, owner, begin, end, location: r.location, seen: now });
        }
    }

    /// Emits every batch that is ready at `now`, each lane in its order. `hold`: the hold
    /// limit, in nanoseconds. `force` (the context is ending): nothing more will come, so
    /// every list goes out with what it has, and work whose list never came goes out alone.
    pub(crate) fn emit(&mut self, now: i64, hold: i64, force: bool) -> Emitted {
        let mut out = Emitted::default();
        self.unarrived.retain(|_, &mut linked| now.saturating_sub(linked) < hold);
        let keys: Vec<u64> = self.lanes.keys().copied().collect();
        for key in keys {
            // Each turn emits the front, or the list it belongs to (which leaves `lists`), or
            // stops: the lane's records and the lists kept shrink every turn.
            let mut before = usize::MAX;
            while let Some(lane) = self.lanes.get(&key) {
                let Some(front) = lane.front() else { break };
                let size = lane.len() + self.lists.len();
                debug_assert!(size < before, "lane {key}: a turn of the emit loop emitted nothing");
                before = size;
                // An earlier launch's record may still come, on this lane: wait for it.
                let earlier = self.unarrived.first_key_value().is_some_and(|(&c, _)| c < front.correlation);
                if earlier && !force {
                    break;
                }
                let (seen, owner) = (front.seen, front.owner);
                let Some(zone) = owner else {
                    self.emit_alone(key, &mut out);
                    continue;
                };
                let Some(list) = self.lists.get_mut(&zone.list) else {
                    self.emit_alone(key, &mut out);
                    continue;
                };
                let Some(taken) = &list.taken else {
                    // Its list is still being recorded (or on its way).
                    let held = now.saturating_sub(seen);
                    if force || held >= hold {
                        if !force && !std::mem::replace(&mut list.reported, true) {
                            out.held.push(HeldLane {
                                lane: Lane::Stream(key),
                                list_id: zone.list,
                                location: None,
                                held_ns: held,
                            });
                        }
                        self.emit_alone(key, &mut out);
                        continue;
                    }
                    break;
                };
                let on_its_lane = taken
                    .zones
                    .binary_search_by_key(&zone.position, |z| z.position)
                    .is_ok_and(|i| taken.zones[i].lane == key);
                if !on_its_lane {
                    // Work of a zone of another stream: its own lane's order.
                    self.emit_alone(key, &mut out);
                    continue;
                }
                let complete = list.arrived >= list.launches;
                let partial = now.saturating_sub(taken.at) >= hold;
                if complete || partial || force {
                    out.lists_partial += usize::from(!complete);
                    self.emit_list(zone.list, &mut out);
                    continue;
                }
                break;
            }
        }
        self.lanes.retain(|_, lane| !lane.is_empty());
        self.sweep(now, hold, force, &mut out);
        out
    }

    /// Emits the front of lane `key` alone, at depth 0.
    fn emit_alone(&mut self, key: u64, out: &mut Emitted) {
        let Some(work) = self.lanes.get_mut(&key).and_then(VecDeque::pop_front) else { return };
        if let Some(zone) = work.owner {
            if let Some(list) = self.lists.get_mut(&zone.list) {
                list.waiting -= 1;
                if list.taken.is_none() {
                    // Released past the hold limit while its list is being recorded: its zone
                    // spans it when the list comes.
                    list.release(zone.position, work.begin, work.end);
                }
            }
        }
        let zone = zone_at(self.base_host_ns, work.location, key, 0, work.begin, work.end);
        out.activities += 1;
        self.push_batch(key, 0, vec![zone], out);
    }

    /// Emits list `id` as one batch: its zones that had work, and that work as their
    /// children; forgets it.
    fn emit_list(&mut self, id: u64, out: &mut Emitted) {
        let Some(mut list) = self.lists.remove(&id) else { return };
        let Some(taken) = list.taken.take() else { return };
        // The list's work on its zones' lanes.
        let mut spans: Vec<Option<(i64, i64)>> = vec![None; taken.zones.len()];
        let mut zones = Vec::new();
        for &key in &list.lanes {
            let Some(lane) = self.lanes.get_mut(&key) else { continue };
            let mut i = 0;
            // Each turn takes record i out or steps past it: one turn a record.
            for _ in 0..lane.len() {
                let index = match lane[i].owner {
                    Some(z) if z.list == id => {
                        taken.zones.binary_search_by_key(&z.position, |u| u.position).ok()
                    }
                    _ => None,
                };
                let Some(index) = index.filter(|&index| taken.zones[index].lane == key) else {
                    i += 1;
                    continue;
                };
                let Some(work) = lane.remove(i) else { break };
                let span = spans[index].get_or_insert((work.begin, work.end));
                *span = (span.0.min(work.begin), span.1.max(work.end));
                let depth = taken.zones[index].depth + 1;
                zones.push(zone_at(self.base_host_ns, work.location, key, depth, work.begin, work.end));
                out.activities += 1;
            }
        }
        // Work released alone while the list was being recorded is still its zone's.
        for &(position, begin, end) in &list.released {
            if let Ok(index) = taken.zones.binary_search_by_key(&position, |u| u.position) {
                let span = spans[index].get_or_insert((begin, end));
                *span = (span.0.min(begin), span.1.max(end));
            }
        }
        // Children after parents: fold spans upwards from the end.
        for index in (0..taken.zones.len()).rev() {
            if let (Some((b, e)), Some(parent)) = (spans[index], taken.zones[index].parent) {
                let span = spans[parent].get_or_insert((b, e));
                *span = (span.0.min(b), span.1.max(e));
            }
        }
        for (zone, span) in taken.zones.into_iter().zip(spans) {
            let Some((begin, end)) = span else {
                out.empty_zones += 1;
                continue;
            };
            let mut z = zone_at(self.base_host_ns, zone.location, zone.lane, zone.depth, begin, end);
            z.launch = zone.launch;
            zones.push(z);
            out.user_zones += 1;
        }
        if let Some(frame) = taken.frame {
            for zone in &mut zones {
                zone.frame = Some(frame);
            }
        }
        // Begin order, parents before the children that begin with them.
        zones.sort_by_key(|z| (z.gpu_begin_ns, z.depth));
        out.lists += 1;
        self.unlink(&mut list);
        if let Some(lane) = zones.first().map(|z| z.lane) {
            let crate::backend::Lane::Stream(key) = lane else {
                unreachable!("activity zones are on streams")
            };
            self.push_batch(key, id, zones, out);
        }
    }

    /// Forgets list `id` (discarded, or given up): its links go, and its work still waiting
    /// goes out alone in its lane's order (work whose list is not known goes out alone).
    fn forget(&mut self, id: u64) {
        if let Some(mut list) = self.lists.remove(&id) {
            self.unlink(&mut list);
        }
    }

    fn unlink(&mut self, list: &mut ListState) {
        for correlation in list.correlations.drain(..) {
            self.links.remove(&correlation);
            self.unarrived.remove(&correlation);
        }
    }

    fn push_batch(&mut self, key: u64, list_id: u64, zones: Vec<Zone>, out: &mut Emitted) {
        let (begin, end) = zones
            .iter()
            .filter(|z| z.lane == crate::backend::Lane::Stream(key))
            .fold((i64::MAX, i64::MIN), |(b, e), z| (b.min(z.host_begin_ns), e.max(z.host_end_ns)));
        let until = self.emitted_until.entry(key).or_insert(i64::MIN);
        out.late += usize::from(begin < *until);
        *until = (*until).max(end);
        out.batches.push((list_id, zones));
    }

    /// What can no longer wait: a taken list none of whose work waits on a lane is emitted
    /// once complete or past the hold limit (its zones without work are counted empty). A
    /// list still being recorded is kept until it is taken (a list is taken when submitted or
    /// dropped; one never taken holds slots of the pool for ever, which bounds them): while
    /// none of its records waits on a lane, the links of its launches that had their record
    /// go (that work went out alone, its spans kept for its zones; a later record of such a
    /// launch, a graph's, goes out alone), and a list whose launches were all untied is
    /// forgotten past the hold limit. With `force`, every list goes.
    fn sweep(&mut self, now: i64, hold: i64, force: bool, out: &mut Emitted) {
        let mut emit = Vec::new();
        let mut forget = Vec::new();
        let mut prune = Vec::new();
        for (&id, list) in &self.lists {
            let over = |since: i64| now.saturating_sub(since) >= hold;
            match &list.taken {
                Some(taken)
                    if force || (list.waiting == 0 && (list.arrived >= list.launches || over(taken.at))) =>
                {
                    emit.push((id, list.arrived >= list.launches));
                }
                None if force => forget.push(id),
                None if list.launches == 0 && list.released.is_empty() && over(list.seen) => forget.push(id),
                None if list.waiting == 0 && list.arrived > 0 => prune.push(id),
                _ => {}
            }
        }
        for (id, complete) in emit {
            out.lists_partial += usize::from(!complete);
            self.emit_list(id, out);
        }
        for id in forget {
            self.forget(id);
        }
        for id in prune {
            self.prune(id);
        }
    }

    /// Drops the links of list `id`'s launches that had their record (none of which waits).
    fn prune(&mut self, id: u64) {
        let Some(list) = self.lists.get_mut(&id) else { return };
        let links = &self.links;
        let arrived =
            |c: &u64| links.get(c).and_then(|l| links.get(&l.head)).is_some_and(|head| head.arrived);
        let (gone, kept): (Vec<u64>, Vec<u64>) = list.correlations.drain(..).partition(arrived);
        list.correlations = kept;
        list.launches -= list.arrived;
        list.arrived = 0;
        for correlation in gone {
            self.links.remove(&correlation);
            self.unarrived.remove(&correlation);
        }
    }
}

/// A zone on lane `lane` between host times `begin` and `end`; its GPU times are counted from
/// the context's base, `base_host_ns`.
fn zone_at(base_host_ns: i64, location: Location, lane: u64, depth: u32, begin: i64, end: i64) -> Zone {
    Zone::new(location, crate::backend::Lane::Stream(lane), depth, begin - base_host_ns, end - base_host_ns)
        .with_host_times(begin, end)
}
