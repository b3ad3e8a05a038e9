#!/usr/bin/env bash
# Device call: the floor reading step by step (BENCH_CUDA_FLOOR_STEPS=1) against from the first, and ours, under DWARF call-graph profiles, in turns.
set -u
tar xJf .devpack/pack.tar.xz || exit 1
P=$PWD/.perf/perf; cd .device-bench
R=$OUT/r; mkdir -p $R; cp COMMIT $R/
for i in 1 2; do for v in floor_steps floor ours_next; do
  impl=${v%_steps}; steps=0; [ "$v" = floor_steps ] && steps=1
  n=$v-$i
  BENCH_CUDA_FLOOR_STEPS=$steps BENCH_CUDA_THREADS=1 BENCH_CUDA_IMPLS=$impl BENCH_CUDA_LISTS=1500 \
    timeout 100 $P record -F 1999 -e cpu-clock --call-graph dwarf,16384 -o $n.data -- ./bench-cuda --bench > $R/$n.txt 2>&1
  echo "$n rc=$?" >> $R/log.txt
  $P report -i $n.data --stdio --children --sort sym --percent-limit 2 -g none > $R/$n-children.txt 2>&1
  rm -f $n.data
done; done
cd $OUT && tar czf r.tgz r && rm -rf r
