// The OpenCL backend: every op of backend.h on an OpenCL 1.2 device, written for mobile GPUs
// (Adreno habits: int4 GEMV reading activations through an image1d_buffer_t, scales staged in
// local memory, vector loads of packed weights) and tested on PoCL (CPU) and NVIDIA's OpenCL.
// Design, tuning and the Android build: docs/OPENCL.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"

namespace perfx::opencl {

/// The OpenCL backend on device `index` of list_devices() (cl_runtime.h; `opencl:N`).
/// Activations are fp16 when the device reports cl_khr_fp16, else fp32; $PERFX_OPENCL_DTYPE=f16
/// or f32 overrides (fp16 storage works on every device: it is read and written with
/// vload_half/vstore_half, arithmetic stays fp32). $PERFX_OPENCL_MAX_ALLOC (bytes, or with a
/// K/M/G/KiB/MiB/GiB suffix; the CLI's --max-alloc) caps one buffer below the device's
/// CL_DEVICE_MAX_MEM_ALLOC_SIZE, which splits larger weights over several buffers.
/// Throws perfx::Error (one line) for: no OpenCL library or platform, no device, `index` out of
/// range (listing the devices), a bad environment value.
std::unique_ptr<Backend> create_opencl_backend(int index);

/// Parses a byte count "123", "64K", "512MiB", "1GiB", "2G" (K/M/G and KiB/MiB/GiB are both
/// powers of 1024). Throws perfx::Error naming `what` for anything else or zero.
uint64_t parse_bytes(const std::string& s, const std::string& what);

/// Measurements for tools/device/opencl_nvidia.sh and the OpenCL tests, on an OpenCL backend.
struct BandwidthReport {
  double copy_gbs = 0;       // copy kernel: (read + written bytes) / device time, GB/s
  double copy_same_gbs = 0;  // the copy kernel moving the GEMV's weight bytes (half read, half
                             // written) from memory, GB/s: what a kernel of that size reaches
  double empty_us = 0;       // device time of the copy kernel on one float4, microseconds
  double copy_same_stream_gbs = 0;  // the same copies enqueued back to back: their span, GB/s
  double gemv_stream_gbs = 0;       // GEMVs back to back (as in a decode step): span / count, GB/s
  double gemv_stream_us = 0;        // that span per GEMV, microseconds
  double gemv_gbs = 0;              // GEMV: (weight + scale bytes read) / device time, GB/s
  double gemv_us = 0;               // device time of one GEMV, microseconds (median)
  std::string config;               // the GEMV's kernel configuration
};

/// Times the device's copy kernel over `copy_bytes` (and over the GEMV's byte count, and on one
/// element: the fixed cost of a kernel), then an int4 g128 GEMV [out, in] at T = 1
/// over enough copies of the weight to exceed the device's last-level cache, with event
/// profiling (device time only). `be` must come from create_opencl_backend.
BandwidthReport measure_gemv_bandwidth(Backend& be, int64_t out, int64_t in, size_t copy_bytes);

}  // namespace perfx::opencl
