#!/usr/bin/env python3
"""Checks Perfetto traces (.pftrace) the way a strict reader would, with Perfetto's own schema
(perfetto_trace_pb2, from the `perfetto` package on PyPI).

trace_processor forgives a trace a lot: it sorts packets by time, resolves tracks and clocks
late. This script does not. For every file it checks that:

- the file parses as a `Trace` whole, and no message written has a field the schema does not
  know (a wrong field number would be one);
- every sequence starts by clearing its incremental state, and every interned id (event
  names, categories, source locations, argument names) is defined on its sequence before a
  packet uses it;
- every track an event is on was described (a `TrackDescriptor`) earlier in the file;
- on every sequence, timestamps resolved to nanoseconds never go back;
- every flow that ends at a slice was started earlier in the file.

Usage: perfetto_check.py TRACE... ; prints one summary line per file, exits 1 on the first
file that fails.
"""

import sys

from google.protobuf.unknown_fields import UnknownFieldSet
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

INCREMENTAL_STATE_CLEARED = 1
BUILTIN_CLOCK_MAX_ID = 63


def unknown(message, path, problems):
    """Fields the schema does not know, in `message` and every message under it."""
    if len(UnknownFieldSet(message)):
        problems.append(f"{path}: unknown fields in {message.DESCRIPTOR.name}")
    for field, value in message.ListFields():
        if field.type != field.TYPE_MESSAGE:
            continue
        values = value if field.is_repeated else [value]
        for child in values:
            unknown(child, f"{path}.{field.name}", problems)


def check(path):
    trace = pb.Trace()
    with open(path, "rb") as f:
        data = f.read()
    trace.ParseFromString(data)
    problems = []
    sequences = {}
    described = set()
    flows = set()
    events = 0
    for index, packet in enumerate(trace.packet):
        where = f"{path}: packet {index}"
        unknown(packet, where, problems)
        seq_id = packet.trusted_packet_sequence_id
        if seq_id == 0:
            problems.append(f"{where}: no sequence id")
            continue
        seq = sequences.setdefault(seq_id, {"valid": False, "last": None, "clocks": {}, "defaults": None})
        if packet.sequence_flags & INCREMENTAL_STATE_CLEARED:
            seq.update(valid=True, interned={k: set() for k in ("names", "categories", "locations", "args")})
        if packet.HasField("trace_packet_defaults"):
            seq["defaults"] = packet.trace_packet_defaults
        if packet.HasField("interned_data"):
            if not seq["valid"]:
                problems.append(f"{where}: interned data before the sequence cleared its state")
            else:
                data = packet.interned_data
                for kind, entries in (("names", data.event_names), ("categories", data.event_categories),
                                      ("locations", data.source_locations), ("args", data.debug_annotation_names)):
                    for entry in entries:
                        seq["interned"][kind].add(entry.iid)
        if packet.HasField("clock_snapshot"):
            for clock in packet.clock_snapshot.clocks:
                if clock.is_incremental:
                    seq["clocks"][clock.clock_id] = clock.timestamp
        if packet.HasField("track_descriptor"):
            described.add(packet.track_descriptor.uuid)
        if not packet.HasField("timestamp"):
            continue
        clock = packet.timestamp_clock_id
        if not clock and seq["defaults"] is not None:
            clock = seq["defaults"].timestamp_clock_id
        if clock in seq["clocks"]:
            seq["clocks"][clock] += packet.timestamp
            ns = seq["clocks"][clock]
        elif clock > BUILTIN_CLOCK_MAX_ID:
            problems.append(f"{where}: timestamp on sequence clock {clock}, never snapshotted")
            continue
        else:
            ns = packet.timestamp
        if seq["last"] is not None and ns < seq["last"]:
            problems.append(f"{where}: sequence {seq_id} goes back from {seq['last']} to {ns}")
        seq["last"] = ns
        if not packet.HasField("track_event"):
            continue
        events += 1
        event = packet.track_event
        if not seq["valid"]:
            problems.append(f"{where}: a track event before its sequence cleared its state")
            continue
        interned = seq["interned"]
        uses = [("names", [event.name_iid] if event.HasField("name_iid") else []),
                ("categories", list(event.category_iids)),
                ("locations", [event.source_location_iid] if event.HasField("source_location_iid") else []),
                ("args", [a.name_iid for a in event.debug_annotations if a.HasField("name_iid")])]
        for kind, iids in uses:
            for iid in iids:
                if iid not in interned[kind]:
                    problems.append(f"{where}: {kind} iid {iid} used before it is defined")
        track = event.track_uuid if event.HasField("track_uuid") else (
            seq["defaults"].track_event_defaults.track_uuid if seq["defaults"] is not None else None)
        if track not in described:
            problems.append(f"{where}: track {track} used before it is described")
        flows.update(event.flow_ids)
        for flow in event.terminating_flow_ids:
            if flow not in flows:
                problems.append(f"{where}: flow {flow} ends before it starts")
    for problem in problems[:20]:
        print(problem)
    print(f"{path}: {len(trace.packet)} packets, {events} track events, {len(sequences)} sequences, "
          f"{len(described)} tracks, {len(flows)} flows: {'ok' if not problems else f'{len(problems)} problems'}")
    return not problems


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(0 if all(check(path) for path in sys.argv[1:]) else 1)
