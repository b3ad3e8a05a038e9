#!/usr/bin/env bash
# On the GPU machine, from the repository's root with .device-bench/ carried (made by
# .ci/device-build.sh): the GPU tests, the CUDA and CUPTI demos, and the GPU benches, each
# run's output under $OUT (one file per step; `tar` them if more than 8). What to run:
#   tests   every GPU test binary (GPU_EVENT_POOL_REQUIRE_{CUDA,VULKAN,WGPU}=1: a skip fails)
#   demos   --backend cuda and cupti, 16 threads x 16 streams x 2000 lists, traces kept
#   benches cuda, cupti, latency, phases (and vulkan, wgpu when a Vulkan loader is carried);
#           or one of them by its name (`phases`, `cuda`, ...)
#   interleaved  the CUPTI bench of a base build (.device-bench/bench-cupti-base, built by
#           hand from the base commit) and of this one, in turns, three times each
#   worlds  the clock's 100,000 generated worlds (tests/clock_worlds.rs, 16 threads)
#   profile the phases bench's one collector (serial_batch32, 1 thread) under perf with
#           DWARF call graphs: self time by symbol, and by caller (carry .perf/, made by
#           ../shared/tools/perf-bundle .perf)
#   phases-turns  the phases bench's one-collector variants of a base build
#           (.device-bench/bench-phases-base) and of this one, in turns, three times each
# The Vulkan loader: carry .gl/ (the device tool's README says how to fetch its debs); it is
# unpacked here and NVIDIA's ICD named.
# e.g. `bash .ci/device-run.sh tests demos` (about 4 minutes), `bash .ci/device-run.sh benches`.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=.device-bench
out=${OUT:-/tmp/out}
mkdir -p "$out/runs"
# What the executables were built from (device-build.sh writes it; the copy's own git state
# here may differ).
echo "executables built from $(cat "$bin/COMMIT" 2>/dev/null || echo unknown)" > "$out/runs/commit.txt"
if [ -d "$bin/lib" ]; then
    # libcudart carried (device-build.sh, CUDART=...): the runtime-API test must find it.
    export LD_LIBRARY_PATH="$PWD/$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" GPU_EVENT_POOL_REQUIRE_CUDART=1
fi
if [ -d .gl ]; then
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
nvidia-smi >> "$out/runs/commit.txt" 2>&1
machine="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1) host, $(nproc) CPU cores"
for what in "$@"; do
    case "$what" in
    tests)
        for t in cuda cuda_devices cupti cupti_source cupti_runtime vulkan wgpu wgpu_ports; do
            [ -x "$bin/test-$t" ] || continue
            GPU_EVENT_POOL_REQUIRE_CUDA=1 GPU_EVENT_POOL_REQUIRE_VULKAN=1 GPU_EVENT_POOL_REQUIRE_WGPU=1 "$bin/test-$t" --test-threads=1 --nocapture > "$out/runs/test-$t.txt" 2>&1
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
            BENCH_RESULTS_DIR="$out/runs" BENCH_MACHINE="$machine" \
                "$bin/bench-$b" --bench > "$out/runs/bench-$b.txt" 2>&1
            echo "bench $b: exit $?" | tee -a "$out/runs/summary.txt"
        done ;;
    phases|cuda|cupti|latency|vulkan|wgpu)
        # One bench alone (as `benches` runs it).
        [ -x "$bin/bench-$what" ] || { echo "no $bin/bench-$what" | tee -a "$out/runs/summary.txt"; continue; }
        BENCH_RESULTS_DIR="$out/runs" BENCH_MACHINE="$machine" \
            "$bin/bench-$what" --bench > "$out/runs/bench-$what.txt" 2>&1
        echo "bench $what: exit $?" | tee -a "$out/runs/summary.txt" ;;
    interleaved)
        [ -x "$bin/bench-cupti-base" ] || { echo "no $bin/bench-cupti-base" | tee -a "$out/runs/summary.txt"; continue; }
        for i in 1 2 3; do
            for side in base head; do
                exe="$bin/bench-cupti"; [ "$side" = base ] && exe="$bin/bench-cupti-base"
                echo "== $side $i" >> "$out/runs/interleaved.txt"
                BENCH_CUPTI_THREADS=1,16 BENCH_RESULTS_DIR="/tmp/interleaved-$side-$i" "$exe" --bench >> "$out/runs/interleaved.txt" 2>&1
                echo "cupti $side $i: exit $?" | tee -a "$out/runs/summary.txt"
            done
        done ;;
    worlds)
        "$bin/test-clock_worlds" --ignored hundred_thousand_worlds --nocapture > "$out/runs/worlds.txt" 2>&1
        echo "worlds: exit $?" | tee -a "$out/runs/summary.txt" ;;
    profile)
        [ -x .perf/perf ] || { echo "no .perf/perf" | tee -a "$out/runs/summary.txt"; continue; }
        BENCH_PHASES_VARIANTS=serial_batch32 BENCH_PHASES_THREADS=1 BENCH_MACHINE="$machine" \
            .perf/perf record -F 2000 -e cpu-clock --call-graph dwarf,8192 -o /tmp/phases.data -- \
            "$bin/bench-phases" --bench > "$out/runs/profile-phases-run.txt" 2>&1
        echo "profile phases: exit $?" | tee -a "$out/runs/summary.txt"
        .perf/perf report -i /tmp/phases.data --stdio --no-children --sort symbol --percent-limit 0.3 -g none \
            > "$out/runs/profile-phases-self.txt" 2>&1
        .perf/perf report -i /tmp/phases.data --stdio --children --sort symbol --percent-limit 2 -g caller,0.5,callee,function,percent \
            2>&1 | head -n 3000 > "$out/runs/profile-phases-callers.txt" ;;
    phases-turns)
        [ -x "$bin/bench-phases-base" ] || { echo "no $bin/bench-phases-base" | tee -a "$out/runs/summary.txt"; continue; }
        for i in 1 2 3; do
            for side in base head; do
                exe="$bin/bench-phases"; [ "$side" = base ] && exe="$bin/bench-phases-base"
                echo "== $side $i" >> "$out/runs/phases-turns.txt"
                BENCH_PHASES_VARIANTS=serial_batch32,e2e_nop BENCH_PHASES_THREADS=1,16 BENCH_MACHINE="$machine" \
                    BENCH_PHASES_JSONL="$out/runs/phases-turns-$side.jsonl" "$exe" --bench >> "$out/runs/phases-turns.txt" 2>&1
                echo "phases $side $i: exit $?" | tee -a "$out/runs/summary.txt"
            done
        done ;;
    esac
done
(cd "$out" && tar czf runs.tar.gz runs && rm -rf runs)
