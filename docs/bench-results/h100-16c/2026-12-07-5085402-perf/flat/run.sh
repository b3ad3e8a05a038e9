#!/usr/bin/env bash
# Device call: flat cpu-clock profiles of ours (zone_next) and the floor at 1 thread, in turns, twice.
set -u
tar xJf .devpack/pack.tar.xz || exit 1
P=$PWD/.perf/perf; cd .device-bench
R=$OUT/r; mkdir -p $R; cp COMMIT $R/; nvidia-smi -L > $R/gpu.txt 2>&1
for i in 1 2; do for impl in ours_next floor; do
  n=$impl-$i
  BENCH_RESULTS_DIR=$R BENCH_CUDA_THREADS=1 BENCH_CUDA_IMPLS=$impl BENCH_CUDA_LISTS=3000 \
    timeout 120 $P record -F 4999 -e cpu-clock -o $n.data -- ./bench-cuda --bench > $R/$n.txt 2>&1
  echo "$n rc=$?" >> $R/log.txt
  $P report -i $n.data --stdio --no-children --sort dso --percent-limit 0.2 > $R/$n-dso.txt 2>&1
  $P report -i $n.data --stdio --no-children --sort dso,sym --percent-limit 0.3 > $R/$n-sym.txt 2>&1
  BENCH_CUDA_THREADS=1 BENCH_CUDA_IMPLS=$impl BENCH_CUDA_LISTS=3000 timeout 60 $P stat -e task-clock,context-switches,cpu-migrations,page-faults -- ./bench-cuda --bench > $R/$n-stat.txt 2>&1
done; done
cd $OUT && tar czf r.tgz r && rm -rf r
