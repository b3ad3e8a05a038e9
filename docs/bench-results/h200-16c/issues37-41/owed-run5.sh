#!/usr/bin/env bash
# Device call: runtime-API launches under CUPTI (libcudart carried), the CUPTI bench with its
# interleaved rounds, CUDA at 1 thread with floor and zone_next each alone in its process
# (alternating x6) and both in one process (x3), the CUPTI demo with 8 threads on 1 stream,
# and whether cuBLAS is on the machine.
set -u
cd "$(dirname "$0")/.."
B=.device-bench; R=$OUT/r5; mkdir -p $R/res
T0=$(date +%s); at() { echo "$1 at $(( $(date +%s) - T0 )) s" | tee -a $R/summary.txt; }
echo "executables built from $(cat $B/COMMIT)" >> $R/summary.txt; nvidia-smi -L >> $R/summary.txt 2>&1
echo "cuBLAS on the loader's path: $(ldconfig -p | grep -c -i cublas) entries" >> $R/summary.txt
ldconfig -p | grep -i cublas >> $R/summary.txt
export GPU_EVENT_POOL_REQUIRE_CUDA=1
LD_LIBRARY_PATH=$PWD/$B/lib GPU_EVENT_POOL_REQUIRE_CUDART=1 timeout 120 $B/test-cupti_runtime --test-threads=1 --nocapture > $R/test-cupti_runtime.txt 2>&1; at "test cupti_runtime rc $?"
grep -E "^test result|SKIP|panicked" $R/test-cupti_runtime.txt | head -5 >> $R/summary.txt
BENCH_RESULTS_DIR=$R/res BENCH_MACHINE="h200-16c" timeout 200 $B/bench-cupti --bench > $R/bench-cupti.txt 2>&1; at "bench cupti rc $?"
sed -n '/^interleaved goals/,$p' $R/bench-cupti.txt | head -5 >> $R/summary.txt
for i in 1 2 3 4 5 6; do for impl in floor ours_next; do
  BENCH_CUDA_THREADS=1 BENCH_CUDA_IMPLS=$impl timeout 30 $B/bench-cuda --bench > $R/alone-$impl-$i.txt 2>&1
  echo "alone $i $(grep -E "^(floor|ours) " $R/alone-$impl-$i.txt)" >> $R/summary.txt
done; done; at "cuda alone"
for i in 1 2 3; do
  BENCH_CUDA_THREADS=1 BENCH_CUDA_IMPLS=floor,ours_next timeout 30 $B/bench-cuda --bench > $R/both-$i.txt 2>&1
  grep -E "^(floor|ours) " $R/both-$i.txt | sed "s/^/both $i /" >> $R/summary.txt
done; at "cuda both"
# Backpressure by flush at 16 threads: the build before (e0cde27) and after the flush that
# first collects beside the others (6e1a368), in turns, twice each, at 12288 (the bench's
# default), 8192, 4096 and never (1000000).
for i in 1 2; do for bp in 12288 8192 4096 1000000; do for b in before after; do
  exe=$B/bench-cuda; [ $b = after ] && exe=$B/bench-cuda-after
  BENCH_CUDA_BACKPRESSURE=$bp BENCH_CUDA_THREADS=16 BENCH_CUDA_IMPLS=floor,ours_next,ours_pairs timeout 60 $exe --bench > $R/bp-$bp-$b-$i.txt 2>&1
  grep -E "^(floor|ours) " $R/bp-$bp-$b-$i.txt | sed "s/^/bp $bp $b $i: /" >> $R/summary.txt
done; done; done; at "cuda backpressure"
for cfg in "--threads 8 --streams 1 --lists 200" "--threads 16 --streams 4 --lists 200"; do
  name=$(echo $cfg | tr -d ' -')
  timeout 100 $B/demo --backend cupti $cfg --cpu-spans --trace /tmp/t.json > $R/demo-cupti-$name.txt 2>&1; at "demo cupti $cfg rc $?"
  grep -iE "emitted|activities|losses|nesting" $R/demo-cupti-$name.txt | head -6 >> $R/summary.txt
  timeout 100 python3 $B/trace-check /tmp/t.json > $R/trace-check-$name.txt 2>&1; tail -1 $R/trace-check-$name.txt >> $R/summary.txt
done
cd $OUT && tar czf r5.tgz r5 && rm -rf r5
