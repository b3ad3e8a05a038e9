#!/usr/bin/env bash
# The Vulkan bench's interleaved group, the query reset on the recording path (vk-old: the
# committed tree, see COMMIT) against the reset in the collector (vk-new: that tree with the
# retire change), in turns, 4 times each.
set -u
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
R=$OUT/r10; mkdir -p $R
echo "vk-old: $(cat .dev5/COMMIT); vk-new: the same with the query reset moved to the collector" > $R/summary.txt
nvidia-smi -L >> $R/summary.txt 2>&1
for i in 1 2 3 4; do for b in old new; do
  timeout 60 .dev5/vk-$b --bench vulkan_interleaved > $R/vk-$b-$i.txt 2>&1
  echo "$b $i: $(grep -E 'crate_zone_next|bare_write|bare_reset|crate_to_bare' $R/vk-$b-$i.txt | tr -s ' ' | tr '\n' '|')" >> $R/summary.txt
done; done
cd $OUT && tar czf r10.tgz r10 && rm -rf r10
