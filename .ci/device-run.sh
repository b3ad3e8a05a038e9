#!/usr/bin/env bash
# On the GPU machine, from the repository's root with .device-bench/ carried (made by
# .ci/device-build.sh): the GPU tests, the CUDA and CUPTI demos, and the GPU benches, each
# run's output under $OUT (one file per step; `tar` them if more than 8). What to run:
#   tests   every GPU test binary (GPU_EVENT_POOL_REQUIRE_CUDA=1: a skip fails)
#   demos   --backend cuda and cupti, 16 threads x 16 streams x 2000 lists, traces kept
#   benches cuda, cupti, latency, phases (and vulkan, wgpu when a Vulkan loader is carried)
# e.g. `bash .ci/device-run.sh tests demos` (about 4 minutes), `bash .ci/device-run.sh benches`.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=.device-bench
out=${OUT:-/tmp/out}
mkdir -p "$out/runs"
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
echo "commit $commit" > "$out/runs/commit.txt"
nvidia-smi >> "$out/runs/commit.txt" 2>&1
for what in "$@"; do
    case "$what" in
    tests)
        for t in cuda cuda_devices cupti cupti_source vulkan wgpu; do
            [ -x "$bin/test-$t" ] || continue
            GPU_EVENT_POOL_REQUIRE_CUDA=1 "$bin/test-$t" --test-threads=1 --nocapture > "$out/runs/test-$t.txt" 2>&1
            echo "test $t: exit $?" | tee -a "$out/runs/summary.txt"
        done ;;
    demos)
        for backend in cuda cupti; do
            "$bin/demo" --backend "$backend" --threads 16 --streams 16 --lists 2000 \
                --trace "/tmp/trace-$backend.json" > "$out/runs/demo-$backend.txt" 2>&1
            echo "demo $backend: exit $?" | tee -a "$out/runs/summary.txt"
            # The trace is too large to come back: checked here (crossings, backward arrows).
            [ -x "$bin/trace-check" ] && "$bin/trace-check" "/tmp/trace-$backend.json" > "$out/runs/trace-check-$backend.txt" 2>&1
            echo "trace-check $backend: exit $?" | tee -a "$out/runs/summary.txt"
        done ;;
    benches)
        for b in cuda cupti latency phases vulkan wgpu; do
            [ -x "$bin/bench-$b" ] || continue
            BENCH_RESULTS_DIR="$out/runs" BENCH_MACHINE="NVIDIA H200 host, 16 CPU cores" \
                "$bin/bench-$b" --bench > "$out/runs/bench-$b.txt" 2>&1
            echo "bench $b: exit $?" | tee -a "$out/runs/summary.txt"
        done ;;
    esac
done
(cd "$out" && tar czf runs.tar.gz runs && rm -rf runs)
