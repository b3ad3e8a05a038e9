#!/usr/bin/env bash
# Device call: the GPU tests whose code changed (error kinds), at this commit.
set -u
tar xJf .devpack/pack.tar.xz || exit 1
for f in .gl/*.deb; do dpkg -x "$f" /; done
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
cd .device-bench
R=$OUT/r; mkdir -p $R; cp COMMIT $R/; nvidia-smi -L > $R/gpu.txt 2>&1
for t in cuda vulkan wgpu wgpu_ports cupti cupti_source cuda_devices; do
  GPU_EVENT_POOL_REQUIRE_VULKAN=1 GPU_EVENT_POOL_REQUIRE_WGPU=1 timeout 45 ./test-$t > $R/test-$t.txt 2>&1
  echo "test $t rc=$?" >> $R/log.txt
done
cd $OUT && tar czf r.tgz r && rm -rf r
