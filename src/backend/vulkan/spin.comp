// A compute shader that keeps one invocation busy until the device's real-time clock
// (VK_KHR_shader_clock's `shaderDeviceClock`) has advanced by `ticks`: GPU work of a known
// duration, for tests, demos and benchmarks (`SpinShader`, which measures the clock's rate).
// The ticks spun are written to a buffer: a loop with no effect would be compiled away.
//
// Built into the committed `spin.spv` with Debian's glslang-tools (glslang 12):
//     glslangValidator -V --target-env vulkan1.2 -o spin.spv spin.comp
// tests/vulkan.rs checks that the committed binary is what this command builds, where
// glslangValidator is installed.
#version 450
#extension GL_EXT_shader_realtime_clock : require
#extension GL_ARB_gpu_shader_int64 : require

layout(local_size_x = 1) in;

layout(push_constant) uniform Spin {
    uint64_t ticks;
} spin;

layout(std430, set = 0, binding = 0) buffer Spun {
    uint64_t ticks;
    uint64_t mixed;
} spun;

// One step of a xorshift-multiply mix: work that cannot be folded away or merged, since each
// step needs the one before and shifts and multiplies do not compose into one.
#define MIX mixed = (mixed ^ (mixed >> 29)) * 0xbf58476d1ce4e5b9UL;
#define MIX8 MIX MIX MIX MIX MIX MIX MIX MIX
#define MIX512 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 \
    MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 \
    MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 \
    MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8 MIX8

void main() {
    uint64_t start = clockRealtimeEXT();
    uint64_t now = start;
    uint64_t mixed = start;
    // llvmpipe (lavapipe) ends a shader's loops after 65535 iterations in all (its guard
    // against hangs), and merges repeated clock reads into one, so each iteration also does
    // 512 dependent steps of arithmetic (about 2.4 us there, measured): a spin can last about
    // 150 ms there, and ends within one iteration of its target.
    while (now - start < spin.ticks) {
        MIX512
        now = clockRealtimeEXT();
    }
    spun.ticks = now - start;
    spun.mixed = mixed;
}
