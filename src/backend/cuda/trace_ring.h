// Host side of the kernel trace (trace.cuh): PERFX_CUDA_TRACE=FILE in a build configured with
// -DPERFX_CUDA_TRACE=ON. Profiling only; the default build never records.
#pragma once

#include <string>

namespace perfx::cuda {

/// The device ring of trace.cuh's records, bound to every instrumented kernel while it lives.
/// Not copyable.
class TraceRing {
 public:
  /// Reads PERFX_CUDA_TRACE. Unset or empty: inert. Set in a build without the trace: throws
  /// perfx::Error naming the CMake option. Else allocates a ring of `cap` records (56 bytes each)
  /// on the current device and binds it; CUDA failures throw perfx::Error.
  explicit TraceRing(unsigned cap = 1u << 19);
  /// Writes the file (write()) and unbinds; never throws (a failure is one stderr line).
  ~TraceRing();
  TraceRing(const TraceRing&) = delete;
  TraceRing& operator=(const TraceRing&) = delete;
  bool active() const { return buf_ != nullptr; }
  /// Whether the backend library was built to record (-DPERFX_CUDA_TRACE=ON).
  static bool built();
  /// The ring's last `cap` records, oldest first, as CSV (kind, tag, cta, smid, t_start,
  /// t_prewait, t_wait, t_end; ns of %globaltimer, 0 where a CTA has no PDL wait) to the
  /// PERFX_CUDA_TRACE file; the caller has synchronized the device.
  void write() const;

 private:
  void* buf_ = nullptr;
  unsigned cap_ = 0;
  std::string path_;
};

}  // namespace perfx::cuda
