# Sums the crate's own instructions (its source files, and std inlined into its functions or
# the bench's recording loop) in a callgrind profile toggled on the recording loop.
import sys, collections, subprocess
out, per = sys.argv[1], sys.argv[2]  # profile, "vk" or "wgpu"
ann = subprocess.run(["callgrind_annotate", "--auto=no", "--show-percs=no", "--threshold=100", out],
                     capture_output=True, text=True).stdout
tree = subprocess.run(["callgrind_annotate", "--tree=caller", "--show-percs=no", "--threshold=100", out],
                      capture_output=True, text=True).stdout
body = ann[ann.index("file:function"):]
tot = 0; rows = collections.Counter()
for l in body.splitlines():
    p = l.split(None, 1)
    if len(p) < 2: continue
    n = p[0].replace(",", "")
    if not n.isdigit(): continue
    n = int(n); rest = p[1].split(" [")[0].strip()
    f, _, fn = rest.partition(":")
    loop = "Recording::list" in fn or "Scope<T>" in fn
    if f.startswith("/work/main/src") or (f.startswith("/rustc") and ("gpu_event_pool" in fn or loop)):
        tot += n; rows[f.replace("/work/main/", "") if not f.startswith("/rustc") else "std inlined"] += n
if per == "vk":
    # crate events: calls of the driver's write from the crate's code (not the bare loop's ash call)
    import re
    ev = 0
    blk = tree.split("\n\n")
    for b in blk:
        if re.search(r"\*  \?\?\?:0x00000000000d68e0", b):
            for l in b.splitlines():
                if l.strip().startswith(tuple("0123456789")) and "<" in l and "ash-" not in l:
                    ev += int(re.search(r"\(([\d,]+)x\)", l).group(1).replace(",", ""))
else:
    ev = 7680
print(f"{out}: crate {tot} Ir, {ev} events, {tot/ev:.1f} per event")
for k, n in rows.most_common(8): print(f"  {n/ev:6.1f} {k}")
