#!/usr/bin/env bash
# The crate's public API, as a list CI compares (docs/verification.md, "The public API"):
#   bash .ci/public-api.sh            writes public-api.txt (commit it, and say in the CHANGELOG why it changed)
#   bash .ci/public-api.sh --check    fails if today's API differs from public-api.txt
# Needs nightly (rustdoc's JSON output). Every feature but `tracy` and `nvtx` (their builds
# need a C++ toolchain and libclang; neither adds API beyond its sink's few items).
set -euo pipefail
cd "$(dirname "$0")/.."
FEATURES=cuda,cupti,tracing,vulkan,wgpu,perfetto
TARGET="${CARGO_TARGET_DIR:-target}/api"
CARGO_TARGET_DIR="$TARGET" cargo +nightly rustdoc -q --lib --features "$FEATURES" -- \
    -Z unstable-options --output-format json
python3 .ci/public-api.py "$TARGET/doc/gpu_event_pool.json" > "$TARGET/public-api.txt"
if [ "${1:-}" = "--check" ]; then
    if ! diff -u public-api.txt "$TARGET/public-api.txt"; then
        echo "The public API differs from public-api.txt (above: - gone, + new). If that is meant," >&2
        echo "run 'bash .ci/public-api.sh', commit public-api.txt and say why in the CHANGELOG." >&2
        exit 1
    fi
    echo "public API as in public-api.txt: $(head -n 1 public-api.txt | sed 's/^# //')"
else
    cp "$TARGET/public-api.txt" public-api.txt
    head -n 1 public-api.txt
fi
