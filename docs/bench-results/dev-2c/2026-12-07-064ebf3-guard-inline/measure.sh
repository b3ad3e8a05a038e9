#!/usr/bin/env bash
# The guard's inlining, before (9a0a4ab) and after (064ebf3), on the 2-core machine (lavapipe).
# Instructions: callgrind (deterministic); times: the benches' own interleaved rounds, the two
# builds in turns.
set -u
cd "$(dirname "$0")"
export XDG_RUNTIME_DIR=/tmp
for c in 9a0a4ab 064ebf3; do
  valgrind --tool=callgrind "--toggle-collect=vulkan::Recording::list" --callgrind-out-file=cg.vulkan-$c.out ./vulkan-$c > cg.vulkan-$c.log 2>&1
  BENCH_WGPU_VARIANT=crate_scope BENCH_WGPU_ROUNDS=3 valgrind --tool=callgrind "--toggle-collect=*Scope<T>::begin" \
    "--toggle-collect=*Scope<T> as core::ops::drop::Drop>::drop" --callgrind-out-file=cg.wgpu-$c.out ./wgpu-$c --bench > cg.wgpu-$c.log 2>&1
  BENCH_PHASES_THREADS=1 BENCH_PHASES_VARIANTS=serial_batch32 BENCH_PHASES_SECONDS=0.2 BENCH_PHASES_JSONL=/dev/null \
    valgrind --tool=callgrind --callgrind-out-file=cg.phases-$c.out ./phases-$c --bench > cg.phases-$c.log 2>&1
done
{
for c in 9a0a4ab 064ebf3; do
  python3 crate_ir.py cg.vulkan-$c.out vk
  python3 crate_ir.py cg.wgpu-$c.out wgpu
  callgrind_annotate --tree=calling --inclusive=yes --threshold=100 cg.phases-$c.out 2>/dev/null | python3 -c "
import sys,re
t=sys.stdin.read()
def incl(name):
    m=re.search(r'^ *([\d,]+) \([^)]*\)  \*  .*'+re.escape(name)+r' \[',t,re.M); return int(m.group(1).replace(',',''))
lists=int(re.search(r'read_list::\{\{closure\}\} \(([\d,]+)x\)',t).group(1).replace(',',''))
z=lists*64
print('phases serial_batch32 at $c:', lists,'lists;', f'read phase {incl(\"read::read_phase\")/z:.1f}, emit phase {incl(\"emit::EventOrder<B>::emit_phase\")/z:.1f} instructions per zone')
"
done
} > instructions.txt 2>&1
for i in 1 2 3 4; do for c in 9a0a4ab 064ebf3; do echo "== vulkan at $c, turn $i"; ./vulkan-$c --bench vulkan_interleaved 2>&1 | grep "vulkan_interleaved/"; done; done > vulkan-turns.txt 2>&1
for i in 1 2 3; do for c in 9a0a4ab 064ebf3; do echo "== wgpu at $c, turn $i"; ./wgpu-$c --bench 2>&1 | grep -v XDG; done; done > wgpu-turns.txt 2>&1
for i in 1 2 3; do for c in 9a0a4ab 064ebf3; do echo "== phases at $c, turn $i"; BENCH_PHASES_THREADS=1 BENCH_PHASES_VARIANTS=e2e_nop,serial_batch32 BENCH_PHASES_SECONDS=2 BENCH_PHASES_JSONL=/dev/null ./phases-$c --bench 2>&1; done; done > phases-turns.txt 2>&1
echo done > done
