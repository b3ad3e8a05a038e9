//! From CUPTI records and closed user zones to batches of zones, in each lane's GPU order
//! (docs/design.md, section 13, "Records as zones"). No CUPTI call here: the context feeds
//! it, so every rule is tested without a GPU.
//!
//! - Each kernel, copy or memset record goes to its lane (its stream), kept in start order,
//!   which is the stream's order (CUPTI may hand buffers over out of order: it holds back a
//!   buffer until every record in it is complete). Its owner is the user zone its launch was
//!   tied to (the launch callback's link, or an `EXTERNAL_CORRELATION` record), if any.
//! - A user zone tree (a zone with no parent, and the zones closed inside it) is emitted as
//!   one batch when all its zones are closed, their links are final (every launch made in
//!   them has been linked), and every linked launch has had a record. The batch holds the
//!   tree's zones that had work on the root's lane, each spanning its work and its
//!   children's, and that work as their children.
//! - A lane's front waits while its owner's tree is not complete, so batches of a lane leave
//!   in start order, except a batch whose records all came after a later batch had left
//!   (`late_batches`). A record with no owner, or whose owner's tree lives on another lane,
//!   is emitted alone at depth 0.

use super::record::{ActivityKind, ActivityRecord};
use crate::backend::Lane;
use crate::launch::Launch;
use crate::location::{DynamicLocation, Location};
use crate::sink::Zone;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;

/// How long a lane's front waits for the record of an earlier linked launch, which CUPTI may
/// hold back in a buffer with work not finished (after that, the batch that comes is late).
pub(super) const HOLD_NS: i64 = 100_000_000;

/// A user zone as its guard closed it.
#[derive(Debug, Clone)]
pub(super) struct ClosedZone {
    /// Its external correlation id, unique in the process.
    pub(super) id: u64,
    /// The zone open on its thread when it began (0: none).
    pub(super) parent: u64,
    /// Its nesting depth on its thread.
    pub(super) depth: u32,
    pub(super) location: Location,
    /// Its stream's lane key; `None` when CUPTI could not name the stream.
    pub(super) lane: Option<u64>,
    /// Where and when it began (host clock).
    pub(super) launch: Launch,
}

/// A record's work, on the host clock.
#[derive(Debug)]
struct Activity {
    correlation_id: u32,
    owner: Option<u64>,
    begin: i64,
    end: i64,
    location: Location,
}

#[derive(Debug, Default)]
struct ZoneState {
    closed: Option<ClosedZone>,
    /// Every external-correlation record of its launches has been delivered.
    final_links: bool,
    /// Launches tied to it (CUPTI correlation ids), and how many of them have had a record.
    links: Vec<u32>,
    arrived: usize,
    /// Arrived records not emitted yet.
    waiting: u32,
    children: Vec<u64>,
    emitted: bool,
}

/// What one pass emitted.
#[derive(Debug, Default)]
pub(super) struct Emitted {
    /// (list id, zones in begin order) per batch, lanes in key order, each lane in its order.
    pub(super) batches: Vec<(u64, Vec<Zone>)>,
    pub(super) user_zones: usize,
    pub(super) activities: usize,
    pub(super) empty_zones: usize,
    /// Batches that began before the end of a batch their lane had already emitted.
    pub(super) late_batches: usize,
}

/// The lane key of CUPTI's (context id, stream id).
pub(super) fn lane_key(context_id: u32, stream_id: u32) -> u64 {
    (u64::from(context_id) << 32) | u64::from(stream_id)
}

#[derive(Debug, Default)]
pub(super) struct Assembler {
    zones: HashMap<u64, ZoneState>,
    /// CUPTI correlation id → (external id, whether a record of it arrived), until its tree
    /// is forgotten. A graph launch has one correlation id for all of its nodes' records.
    links: HashMap<u32, (u64, bool)>,
    lanes: BTreeMap<u64, VecDeque<Activity>>,
    /// Zones closed since the last `records`: final once that pass's records are in.
    unfinal: Vec<u64>,
    /// Linked launches with no record yet, by correlation id, with the host time they were
    /// linked at: a lane's front waits for an earlier one (it may be this lane's) for up to
    /// `HOLD_NS`.
    unarrived: BTreeMap<u32, i64>,
    /// The collector's host time now (`set_now`).
    now: i64,
    /// The latest end each lane has emitted (host clock), to count late batches.
    emitted_until: HashMap<u64, i64>,
    /// Roots whose trees may be finished: checked by `sweep`.
    candidates: Vec<u64>,
    /// The last kernel name met, and its location: most records repeat it.
    last_name: Option<(String, Location)>,
    /// Locations of kernels outside graphs, by name.
    names: HashMap<String, Location>,
    /// The host time of GPU time 0 (the context's base).
    base_host_ns: i64,
}

impl Assembler {
    /// The host time of this pass: links given from now on are stamped with it.
    pub(super) fn set_now(&mut self, now: i64) {
        self.now = now;
    }

    pub(super) fn new(base_host_ns: i64) -> Self {
        Self { base_host_ns, ..Self::default() }
    }

    /// Records and user zones held, not emitted yet.
    pub(super) fn pending(&self) -> usize {
        self.lanes.values().map(VecDeque::len).sum::<usize>() + self.zones.len()
    }

    /// A user zone closed before the flush whose records come next.
    pub(super) fn close(&mut self, zone: ClosedZone) {
        let (id, parent) = (zone.id, zone.parent);
        self.zones.entry(id).or_default().closed = Some(zone);
        if parent != 0 {
            self.zones.entry(parent).or_default().children.push(id);
        } else {
            self.candidates.push(id);
        }
        self.unfinal.push(id);
    }

    /// Ties the launch with CUPTI correlation id `correlation_id` to zone `zone`, given before
    /// the records of the flush that follows the zone's close; zone 0 unties it (the call
    /// failed: it launched nothing).
    pub(super) fn link(&mut self, correlation_id: u32, zone: u64) {
        if zone == 0 {
            if let Some((owner, false)) = self.links.get(&correlation_id).copied() {
                self.links.remove(&correlation_id);
                self.unarrived.remove(&correlation_id);
                if let Some(z) = self.zones.get_mut(&owner) {
                    z.links.retain(|&c| c != correlation_id);
                }
            }
            return;
        }
        self.links.insert(correlation_id, (zone, false));
        self.unarrived.insert(correlation_id, self.now);
        self.zones.entry(zone).or_default().links.push(correlation_id);
    }

    /// The records one flush delivered (all of them: links are matched after the whole
    /// delivery), with `host` mapping CUPTI's times onto the host clock.
    pub(super) fn records(&mut self, records: Vec<ActivityRecord>, host: impl Fn(u64) -> i64) {
        for r in &records {
            if let (ActivityKind::ExternalCorrelation, Some(external)) = (r.kind, r.external_id) {
                self.link(r.correlation_id, external);
            }
        }
        for r in records {
            if r.kind == ActivityKind::ExternalCorrelation {
                continue;
            }
            let link = self.links.get_mut(&r.correlation_id);
            let first = link.as_ref().is_some_and(|(_, seen)| !seen);
            if first {
                self.unarrived.remove(&r.correlation_id);
            }
            let owner = link.map(|(zone, seen)| {
                *seen = true;
                *zone
            });
            if let Some(zone) = owner.and_then(|id| self.zones.get_mut(&id)) {
                zone.arrived += usize::from(first);
                zone.waiting += 1;
            }
            let (begin, end) = (host(r.start_ns), host(r.end_ns));
            let key = lane_key(r.context_id, r.stream_id);
            let location = self.location(&r);
            let lane = self.lanes.entry(key).or_default();
            // In start order: mostly at the back.
            let at = lane.len() - lane.iter().rev().take_while(|a| a.begin > begin).count();
            lane.insert(
                at,
                Activity { correlation_id: r.correlation_id, owner, begin, end: end.max(begin), location },
            );
        }
        for id in std::mem::take(&mut self.unfinal) {
            if let Some(zone) = self.zones.get_mut(&id) {
                zone.final_links = true;
            }
        }
    }

    fn location(&mut self, r: &ActivityRecord) -> Location {
        let name = match (r.kind, &r.name) {
            (ActivityKind::Kernel, Some(name)) => super::demangle::function_name(name),
            (ActivityKind::Kernel, None) => "kernel".into(),
            (ActivityKind::Memcpy, _) => "memcpy".into(),
            _ => "memset".into(),
        };
        if r.graph_id != 0 {
            return DynamicLocation::new(name)
                .arg("graph", u64::from(r.graph_id))
                .arg("graph_node", r.graph_node_id)
                .into();
        }
        if let Some((last, location)) = &self.last_name {
            if *last == name {
                return location.clone();
            }
        }
        if let Some(known) = self.names.get(name.as_ref()) {
            let known = known.clone();
            self.last_name = Some((name.into_owned(), known.clone()));
            return known;
        }
        let location = Location::Dynamic(Arc::new(DynamicLocation::new(name.as_ref())));
        self.names.insert(name.clone().into_owned(), location.clone());
        self.last_name = Some((name.into_owned(), location.clone()));
        location
    }

    /// The root of `id`'s tree, when every zone on the way is closed.
    fn root(&self, mut id: u64) -> Option<u64> {
        loop {
            let parent = self.zones.get(&id)?.closed.as_ref()?.parent;
            if parent == 0 {
                return Some(id);
            }
            id = parent;
        }
    }

    /// `root`'s zones, parents first.
    fn tree(&self, root: u64) -> Vec<u64> {
        let mut ids = vec![root];
        let mut i = 0;
        while let Some(&id) = ids.get(i) {
            if let Some(zone) = self.zones.get(&id) {
                ids.extend_from_slice(&zone.children);
            }
            i += 1;
        }
        ids
    }

    /// Whether every zone of `tree` is closed with final links and every launch linked to it
    /// has had a record. `force`: closed is enough.
    fn complete(&self, tree: &[u64], force: bool) -> bool {
        tree.iter().all(|id| {
            self.zones.get(id).is_some_and(|z| {
                z.closed.is_some() && (force || (z.final_links && z.arrived == z.links.len()))
            })
        })
    }

    /// Emits every batch that is ready, each lane in its order. `force` (after a forced
    /// flush of synchronized streams): nothing more will arrive, so incomplete trees go out
    /// with what they have and records whose zone never closed go out alone.
    pub(super) fn emit(&mut self, force: bool) -> Emitted {
        let mut out = Emitted::default();
        let now = self.now;
        self.unarrived.retain(|_, &mut linked| now.saturating_sub(linked) < HOLD_NS);
        let keys: Vec<u64> = self.lanes.keys().copied().collect();
        for key in keys {
            while let Some(front) = self.lanes.get(&key).and_then(VecDeque::front) {
                // An earlier launch's record may still come, on this lane: wait for it.
                let earlier =
                    self.unarrived.first_key_value().is_some_and(|(&c, _)| c < front.correlation_id);
                if earlier && !force {
                    break;
                }
                let Some(owner) = front.owner else {
                    self.emit_alone(key, &mut out);
                    continue;
                };
                let root = self.root(owner);
                let root_lane = root.and_then(|r| self.zones.get(&r)?.closed.as_ref()?.lane);
                let emitted = root.is_some_and(|r| self.zones[&r].emitted);
                match (root, root_lane) {
                    // A graph node's record that came after its tree went out.
                    (Some(_), _) if emitted => self.emit_alone(key, &mut out),
                    (Some(root), Some(lane)) if lane == key => {
                        let tree = self.tree(root);
                        if self.complete(&tree, force) {
                            self.emit_tree(key, root, &tree, &mut out);
                        } else if force {
                            self.emit_alone(key, &mut out);
                        } else {
                            break;
                        }
                    }
                    // Its tree belongs to another lane, or CUPTI could not name its stream.
                    (Some(_), _) => self.emit_alone(key, &mut out),
                    // A zone on the way is still open.
                    (None, _) if force => self.emit_alone(key, &mut out),
                    (None, _) => break,
                }
            }
        }
        self.lanes.retain(|_, lane| !lane.is_empty());
        self.sweep(force, &mut out);
        out
    }

    fn emit_alone(&mut self, key: u64, out: &mut Emitted) {
        let Some(activity) = self.lanes.get_mut(&key).and_then(VecDeque::pop_front) else {
            return;
        };
        if let Some(zone) = activity.owner.and_then(|id| self.zones.get_mut(&id)) {
            zone.waiting -= 1;
        }
        if let Some(root) = activity.owner.and_then(|id| self.root(id)) {
            self.candidates.push(root);
        }
        let zone = self.zone(activity.location, key, 0, activity.begin, activity.end);
        out.activities += 1;
        self.push_batch(key, 0, vec![zone], out);
    }

    fn zone(&self, location: Location, key: u64, depth: u32, begin: i64, end: i64) -> Zone {
        Zone::new(location, Lane::Stream(key), depth, begin - self.base_host_ns, end - self.base_host_ns)
            .with_host_times(begin, end)
    }

    /// Emits `root`'s tree as one batch: its work on lane `key`, and its zones that had some.
    fn emit_tree(&mut self, key: u64, root: u64, tree: &[u64], out: &mut Emitted) {
        let members: HashSet<u64> = tree.iter().copied().collect();
        let waiting: u32 = tree.iter().filter_map(|id| self.zones.get(id)).map(|z| z.waiting).sum();
        let lane = self.lanes.get_mut(&key).expect("emit_tree on a lane with a front");
        // The tree's work on this lane, from the front (where it mostly is): stop once every
        // record of the tree still waiting (on any lane) has been looked for.
        let mut left = waiting;
        let mut work = Vec::new();
        let mut i = 0;
        while left > 0 && i < lane.len() {
            if lane[i].owner.is_some_and(|o| members.contains(&o)) {
                work.extend(lane.remove(i));
                left -= 1;
            } else {
                i += 1;
            }
        }
        let mut spans: HashMap<u64, (i64, i64)> = HashMap::new();
        let mut zones = Vec::with_capacity(work.len() + tree.len());
        for a in work {
            let owner = a.owner.expect("work of the tree has an owner");
            let state = self.zones.get_mut(&owner).expect("a tree member is known");
            state.waiting -= 1;
            let depth = state.closed.as_ref().map_or(0, |c| c.depth + 1);
            let span = spans.entry(owner).or_insert((a.begin, a.end));
            *span = (span.0.min(a.begin), span.1.max(a.end));
            zones.push(self.zone(a.location, key, depth, a.begin, a.end));
            out.activities += 1;
        }
        // Children after parents in `tree`: fold spans upwards from the end.
        for &id in tree.iter().rev() {
            let parent = self.zones[&id].closed.as_ref().map_or(0, |c| c.parent);
            if let (Some(&(b, e)), true) = (spans.get(&id), parent != 0 && id != root) {
                let span = spans.entry(parent).or_insert((b, e));
                *span = (span.0.min(b), span.1.max(e));
            }
        }
        for &id in tree {
            let Some(&(begin, end)) = spans.get(&id) else { continue };
            let state = self.zones.get_mut(&id).expect("a tree member is known");
            state.emitted = true;
            let closed = state.closed.clone().expect("a complete tree is closed");
            zones.push(self.zone(closed.location, key, closed.depth, begin, end).with_launch(closed.launch));
            out.user_zones += 1;
        }
        // Begin order, parents before the children that begin with them.
        zones.sort_by_key(|z| (z.gpu_begin_ns, z.depth));
        self.candidates.push(root);
        self.push_batch(key, root, zones, out);
    }

    fn push_batch(&mut self, key: u64, list_id: u64, zones: Vec<Zone>, out: &mut Emitted) {
        let (begin, end) = zones
            .iter()
            .fold((i64::MAX, i64::MIN), |(b, e), z| (b.min(z.host_begin_ns), e.max(z.host_end_ns)));
        let until = self.emitted_until.entry(key).or_insert(i64::MIN);
        out.late_batches += usize::from(begin < *until);
        *until = (*until).max(end);
        out.batches.push((list_id, zones));
    }

    /// Forgets trees with nothing left to arrive or emit; their zones never emitted had no
    /// work on their lane (`empty_zones`).
    fn sweep(&mut self, force: bool, out: &mut Emitted) {
        let mut roots = std::mem::take(&mut self.candidates);
        if force {
            roots = self
                .zones
                .iter()
                .filter(|(_, z)| z.closed.as_ref().is_some_and(|c| c.parent == 0))
                .map(|(&id, _)| id)
                .collect();
        }
        roots.sort_unstable();
        roots.dedup();
        for root in roots {
            if !self.zones.contains_key(&root) {
                continue;
            }
            let tree = self.tree(root);
            let done = self.complete(&tree, force) && tree.iter().all(|id| self.zones[id].waiting == 0);
            if done {
                for id in tree {
                    if let Some(zone) = self.zones.remove(&id) {
                        out.empty_zones += usize::from(!zone.emitted);
                        for correlation_id in zone.links {
                            self.links.remove(&correlation_id);
                            self.unarrived.remove(&correlation_id);
                        }
                    }
                }
            }
        }
        if force {
            self.links.clear();
            self.unarrived.clear();
            // Zones that never closed, or whose parent never did: nothing more will come.
            let stale: Vec<u64> =
                self.zones.iter().filter(|(_, z)| z.waiting == 0).map(|(&id, _)| id).collect();
            for id in stale {
                if let Some(zone) = self.zones.remove(&id) {
                    out.empty_zones += usize::from(zone.closed.is_some() && !zone.emitted);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
