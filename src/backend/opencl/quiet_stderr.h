// Silencing a driver that prints to stderr itself while it compiles a kernel.
#pragma once

namespace perfx::opencl {

/// While any QuietStderr lives, this process's stderr (file descriptor 2) goes to /dev/null: some
/// drivers (PoCL) print compiler diagnostics there themselves, and a failed build must stay one
/// error line (the build log is in the error). PERFX_OPENCL_VERBOSE=1 keeps stderr as it is.
///
/// The redirection is process-wide and reference-counted under one mutex: the first live guard
/// redirects, the last one to end restores the original descriptor, whatever the order in which
/// guards on several threads end (two guards that each saved and restored fd 2 on their own could
/// leave stderr on /dev/null for good). Other threads' stderr output is lost while a guard lives,
/// so guards are kept to the driver's compile call. Never throws: if /dev/null cannot be opened or
/// fd 2 duplicated, stderr is left as it is.
class QuietStderr {
 public:
  QuietStderr();
  ~QuietStderr();
  QuietStderr(const QuietStderr&) = delete;
  QuietStderr& operator=(const QuietStderr&) = delete;

 private:
  bool counted_ = false;  // this guard holds one reference
};

}  // namespace perfx::opencl
