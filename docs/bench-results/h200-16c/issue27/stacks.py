#!/usr/bin/env python3
"""Aggregates `perf script` output (samples with call chains): per thread name, and for
samples whose chain passes through a given frame (substring), the chain from that frame down
to the leaf (top entries). Usage: perf script -i X | stacks.py ANCHOR [ANCHOR...]"""
import sys, re, collections
anchors = sys.argv[1:]
by_comm = collections.Counter()
below = {a: collections.Counter() for a in anchors}
through = {a: collections.Counter() for a in anchors}
leaf = collections.Counter()
total = 0
def short(sym):
    sym = re.sub(r"\+0x[0-9a-f]+$", "", sym)
    sym = re.sub(r"<[^<>]*>", "", sym)
    sym = re.sub(r"<[^<>]*>", "", sym)
    sym = re.sub(r"::h[0-9a-f]{16}$", "", sym)
    parts = sym.split("::")
    return "::".join(parts[-2:]) if len(parts) > 2 else sym
def flush(comm, frames):
    global total
    if comm is None:
        return
    total += 1
    by_comm[re.sub(r"\d+$", "N", comm)] += 1
    names = [short(f) for f in frames]
    leaf[" <- ".join(names[:4])] += 1
    for a in anchors:
        for i, n in enumerate(names):
            if a in n:
                through[a][comm] += 1
                below[a][" <- ".join(names[max(0, i - 7):i + 1])] += 1
                break
comm, frames = None, []
for line in sys.stdin:
    if not line.strip():
        flush(comm, frames); comm, frames = None, []
        continue
    if not line.startswith((" ", "\t")):
        flush(comm, frames)
        comm = line.split()[0] if line.split() else "?"
        m = re.match(r"^(.*?)\s+\d+(/\d+)?\s+\[\d+\]", line)
        if m: comm = m.group(1).strip()
        frames = []
    else:
        parts = line.strip().split(None, 1)
        if len(parts) == 2:
            frames.append(parts[1].rsplit(" (", 1)[0])
flush(comm, frames)
print(f"samples {total}")
print("== by thread")
for c, n in by_comm.most_common(20): print(f"{n:8d} {100*n/max(total,1):5.1f}%  {c}")
print("== leaf chains (leaf first)")
for c, n in leaf.most_common(40): print(f"{n:8d} {100*n/max(total,1):5.1f}%  {c}")
for a in anchors:
    s = sum(below[a].values())
    print(f"== through {a}: {s} samples ({100*s/max(total,1):.1f}%)")
    for c, n in below[a].most_common(30): print(f"{n:8d} {100*n/max(s,1):5.1f}%  {c}")
