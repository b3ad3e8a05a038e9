#!/usr/bin/env bash
# Device call: DWARF call-graph profiles of ours (zone_next) and the floor at 1 thread: which driver call holds the hot libcuda address.
set -u
tar xJf .devpack/pack.tar.xz || exit 1
P=$PWD/.perf/perf; cd .device-bench
R=$OUT/r; mkdir -p $R; cp COMMIT $R/
for impl in ours_next floor; do
  BENCH_CUDA_THREADS=1 BENCH_CUDA_IMPLS=$impl BENCH_CUDA_LISTS=1500 \
    timeout 120 $P record -F 1999 -e cpu-clock --call-graph dwarf,16384 -o $impl.data -- ./bench-cuda --bench > $R/$impl.txt 2>&1
  echo "$impl rc=$?" >> $R/log.txt
  $P report -i $impl.data --stdio --children --sort sym --percent-limit 2 -g none > $R/$impl-children.txt 2>&1
  $P report -i $impl.data --stdio --no-children --sort dso,sym --percent-limit 3 -g caller,0.5,callee,function,percent --max-stack 12 > $R/$impl-callers.txt 2>&1
done
cd $OUT && tar czf r.tgz r && rm -rf r
