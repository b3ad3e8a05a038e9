#!/usr/bin/env bash
# The device call of this directory (run from the repository root with .devpack carried;
# .devpack/pack.tar.xz held .device-bench/bench-cuda built at 5085402 and bench-cuda-rest,
# the same with exp-rest.patch applied).
set -u
tar xJf .devpack/pack.tar.xz && cd .device-bench || exit 1
T0=$(date +%s); left() { echo $(( 570 - ($(date +%s) - T0) )); }
R=$OUT/r; mkdir -p $R; cp COMMIT $R/; nvidia-smi -L > $R/gpu.txt 2>&1; nproc >> $R/gpu.txt
for i in 1 2 3; do
  for v in head r0 r2 r8 r32; do
    case $v in head) b=./bench-cuda; e=;; r*) b=./bench-cuda-rest; e=${v#r};; esac
    mkdir -p $R/$v-$i
    GEP_REST=$e BENCH_RESULTS_DIR=$R/$v-$i BENCH_CUDA_THREADS=1 BENCH_CUDA_IMPLS=floor,ours_next \
      timeout 60 $b --bench > $R/part-$v-$i.txt 2>&1; echo "part $v $i rc=$? t=$(( $(date +%s) - T0 ))" >> $R/log.txt
  done
done
for v in head r8; do
  l=$(left); [ "$l" -lt 60 ] && { echo "full $v skipped: $l s left" >> $R/log.txt; continue; }
  case $v in head) b=./bench-cuda; e=;; r8) b=./bench-cuda-rest; e=8;; esac
  mkdir -p $R/full-$v
  t=$l; [ "$v" = head ] && t=$(( l / 2 > 60 ? l / 2 : l ))
  GEP_REST=$e BENCH_RESULTS_DIR=$R/full-$v timeout $t $b --bench > $R/full-$v.txt 2>&1
  echo "full $v rc=$? t=$(( $(date +%s) - T0 ))" >> $R/log.txt
done
cd $OUT && tar czf r.tgz r && rm -rf r
