#!/usr/bin/env bash
# The collector's read looking each event up once: 064ebf3 against bbe01c4, on the 2-core
# machine (loaded by CI). Instructions by callgrind (deterministic), times in turns.
set -u
cd "$(dirname "$0")"
for c in 064ebf3 bbe01c4; do
  BENCH_PHASES_THREADS=1 BENCH_PHASES_VARIANTS=serial_batch32 BENCH_PHASES_SECONDS=0.2 BENCH_PHASES_JSONL=/dev/null \
    valgrind --tool=callgrind --callgrind-out-file=cg.phases-$c.out ./phases-$c --bench > cg.phases-$c.log 2>&1
  callgrind_annotate --tree=calling --inclusive=yes --threshold=100 cg.phases-$c.out 2>/dev/null | python3 -c "
import sys,re
t=sys.stdin.read()
def incl(name):
    m=re.search(r'^ *([\d,]+) \([^)]*\)  \*  .*'+re.escape(name)+r' \[',t,re.M); return int(m.group(1).replace(',',''))
lists=int(re.search(r'read_list::\{\{closure\}\} \(([\d,]+)x\)',t).group(1).replace(',',''))
z=lists*64
print('phases serial_batch32 at $c:', lists,'lists;', f'read phase {incl(\"read::read_phase\")/z:.1f}, emit phase {incl(\"emit::EventOrder<B>::emit_phase\")/z:.1f} instructions per zone')
" >> instructions.txt
done
for i in 1 2 3 4; do for c in 064ebf3 bbe01c4; do echo "== phases at $c, turn $i"; BENCH_PHASES_THREADS=1 BENCH_PHASES_VARIANTS=e2e_nop,serial_batch32 BENCH_PHASES_SECONDS=2 BENCH_PHASES_JSONL=/dev/null ./phases-$c --bench 2>&1; done; done > phases-turns.txt 2>&1
echo done > done
