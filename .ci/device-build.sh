#!/usr/bin/env bash
# Builds every executable the GPU machine runs (tests, benches, the demo) here, and copies
# them into .device-bench/ under stable names (no hash), stripped: carry that folder
# (`.git/info/exclude` lists it) and run .ci/device-run.sh there (docs/benchmarks.md, "On
# the GPU machine"). Takes the features of each: cuda, cupti, vulkan, wgpu.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.device-bench/' .git/info/exclude 2>/dev/null || echo '/.device-bench/' >> .git/info/exclude
out=.device-bench
mkdir -p "$out"
export CARGO_TARGET_DIR=target/device
# `cargo ... --no-run --message-format=json` names each executable: copy it as <name>.
copy() {
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        print(m["target"]["name"], m["executable"])
' | while read -r name path; do cp "$path" "$1/$2$name"; done
}
cargo test --profile bench --features cuda,cupti,vulkan,wgpu --no-run --message-format=json \
    --test cuda --test cuda_devices --test cupti --test cupti_source --test cupti_runtime --test vulkan --test wgpu --test wgpu_ports --test clock_worlds | copy "$out" test-
cargo build --profile bench --features cuda,cupti,vulkan,tracing --example demo --message-format=json | copy "$out" ""
cargo bench -p gpu-event-pool-benches --features cuda,cupti,vulkan,wgpu --no-run --message-format=json \
    --bench cuda --bench cupti --bench vulkan --bench wgpu --bench latency --bench phases | copy "$out" bench-
# Stripped, but for the phases bench: perf (../shared/tools/perf-bundle) reads its symbols.
for f in "$out"/*; do [ "$f" = "$out/bench-phases" ] || strip "$f" 2>/dev/null || true; done
# The trace checker (../shared/tools, which does not travel) runs there on the demos' traces.
cp ../shared/tools/trace-check "$out/" 2>/dev/null || echo "no ../shared/tools/trace-check: the demos' traces are not checked there"
chmod +x "$out"/* 2>/dev/null || true
# libcudart for tests/cupti_runtime.rs: `CUDART=<path to libcudart.so.13>` (the
# `nvidia-cuda-runtime` wheel's nvidia/cu13/lib/), copied as lib/libcudart.so, a name cudarc
# tries.
if [ -n "${CUDART:-}" ]; then
    mkdir -p "$out/lib" && cp "$CUDART" "$out/lib/libcudart.so"
fi
git describe --always --dirty --abbrev=7 > "$out/COMMIT" 2>/dev/null || echo unknown > "$out/COMMIT"
ls -la "$out"
du -sh "$out"
