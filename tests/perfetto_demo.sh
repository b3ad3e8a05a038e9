#!/usr/bin/env bash
# Checks what one run of the demo wrote with Perfetto's own importer: every file it wrote in
# DIR (trace.json, trace.pftrace, flight-recorder/*.pftrace) loads with no import error or
# data loss; the Perfetto trace shows the Chrome trace's zones, tracks, nesting, times to the
# nanosecond, flows and counters; the flight recorder's last dump shows the Perfetto trace's
# zones of its window at the same nanoseconds; every Perfetto file passes
# tests/perfetto_check.py.
#
# Usage: tests/perfetto_demo.sh DIR  (after: cd DIR && demo --perfetto trace.pftrace
#        --flight-recorder SECONDS [--cpu-spans]). CPU spans are compared as the zones are, to
#        the nanosecond: both layers take one reading of the clock per span edge. Prints
#        SKIPPED where the importer is absent.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=$1
tp="$here/../../shared/tools/perfetto/trace_processor_shell"
if [ ! -x "$tp" ]; then
    echo "SKIPPED the demo's traces: no ../shared/tools/perfetto/trace_processor_shell beside the repository"
    exit 0
fi
errors="select name, idx, value from stats where severity in ('error', 'data_loss') and value > 0;"
query() { "$tp" -q <(echo "$2") "$1" 2>/dev/null; }
shopt -s nullglob
for trace in "$dir"/trace.json "$dir"/trace.pftrace "$dir"/flight-recorder/*.pftrace; do
    found=$(query "$trace" "$errors" | tail -n +2)
    if [ -n "$found" ]; then
        echo "$trace: import errors:" >&2
        echo "$found" >&2
        exit 1
    fi
    echo "$trace: loads with no error ($(query "$trace" "select count(*) from slice;" | tail -n 1) slices)"
done
# Flows are compared by their ends' names and times but the name of the slice they end at:
# the Chrome importer binds a flow's end by time, so where a nested zone begins with its
# parent it binds the parent's arrow to the nested zone (tests/perfetto.rs checks that every
# Perfetto arrow ends at its own zone).
columns() {
    case "$1" in
        flows) cut -d, -f1,2,4 ;;
        *) cat ;;
    esac
}
for what in slices flows counters; do
    sql=$(cat "$here/perfetto_common/$what.sql")
    if ! diff <(query "$dir/trace.json" "$sql" | columns $what) <(query "$dir/trace.pftrace" "$sql" | columns $what) > "$dir/$what.diff"; then
        echo "trace.pftrace and trace.json differ in their $what: $dir/$what.diff" >&2
        head -n 20 "$dir/$what.diff" >&2
        exit 1
    fi
    echo "trace.pftrace and trace.json: the same $what ($(query "$dir/trace.json" "$sql" | tail -n +2 | wc -l) rows)"
done
# The flight recorder's dump at the end of the run overlays the streamed trace: the zones and
# launches of its window at the same nanoseconds (depths aside: a dump holds no CPU span for a
# launch to nest in).
last="$dir/flight-recorder/last.pftrace"
if [ -f "$last" ]; then
    from=$(query "$last" "select min(ts) from slice where category is null or category = 'launch';" | tail -n 1)
    zones="select name, ts, dur from slice where (category is null or category = 'launch') and ts >= $from order by ts, dur desc, name;"
    if ! diff <(query "$dir/trace.pftrace" "$zones") <(query "$last" "$zones") > "$dir/dump.diff"; then
        echo "flight-recorder/last.pftrace does not overlay trace.pftrace: $dir/dump.diff" >&2
        head -n 20 "$dir/dump.diff" >&2
        exit 1
    fi
    echo "flight-recorder/last.pftrace overlays trace.pftrace: the same zones at the same ns ($(query "$last" "$zones" | tail -n +2 | wc -l) rows)"
fi
python3 "$here/perfetto_check.py" "$dir/trace.pftrace" "$dir"/flight-recorder/*.pftrace
