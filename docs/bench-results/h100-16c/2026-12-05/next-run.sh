#!/usr/bin/env bash
# Device call 4 of 2026-12-05 (afternoon): built from COMMIT (ef58c92; "-dirty": docs only);
# bench-cuda-old from f8c12a5. Backpressure by flush at 16 threads before (old) and after
# (new) concurrent flushes make one pass, in turns; the floor read as ours reads
# (BENCH_CUDA_FLOOR_STEPS=1) at 1 thread; the record bench; the final CUDA bench.
set -u
cd "$(dirname "$0")/.."
B=.dev4; R=$OUT/r9; mkdir -p $R/res
T0=$(date +%s); at() { echo "$1 at $(( $(date +%s) - T0 )) s" | tee -a $R/summary.txt; }
echo "executables built from $(cat $B/COMMIT) (bench-cuda-old: f8c12a5)" >> $R/summary.txt; nvidia-smi -L >> $R/summary.txt 2>&1
for i in 1 2; do for b in old new; do
  exe=$B/bench-cuda; [ $b = old ] && exe=$B/bench-cuda-old
  BENCH_CUDA_THREADS=16 BENCH_CUDA_IMPLS=floor,ours timeout 120 $exe --bench > $R/bp-$b-$i.txt 2>&1
  grep -E "^(floor|ours) |^  flush" $R/bp-$b-$i.txt | cut -c1-140 | sed "s/^/$b $i: /" >> $R/summary.txt
done; done; at "backpressure old/new"
for i in 1 2; do for steps in 0 1; do
  BENCH_CUDA_FLOOR_STEPS=$steps BENCH_CUDA_THREADS=1 BENCH_CUDA_IMPLS=floor,ours_next timeout 60 $B/bench-cuda --bench > $R/steps-$steps-$i.txt 2>&1
  grep -E "^(floor|ours) " $R/steps-$steps-$i.txt | cut -c1-200 | sed "s/^/floor steps $steps, $i: /" >> $R/summary.txt
done; done; at "floor steps"
BENCH_RESULTS_DIR=$R/res BENCH_MACHINE="h100-16c" timeout 240 $B/bench-record --bench --measurement-time 2 --warm-up-time 0.5 > $R/bench-record.txt 2>&1; at "bench record rc $?"
BENCH_RESULTS_DIR=$R/res BENCH_MACHINE="h100-16c" timeout 200 $B/bench-cuda --bench > $R/bench-cuda.txt 2>&1; at "bench cuda rc $?"
grep -E "^(floor|ours|seed)|^backpressure|^  flush|^1 thread|^zone_begin|threads  (ours|cuEvent)" $R/bench-cuda.txt | cut -c1-250 >> $R/summary.txt
cd $OUT && tar czf r9.tgz r9 && rm -rf r9
