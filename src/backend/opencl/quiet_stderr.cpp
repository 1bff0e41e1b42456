#include "backend/opencl/quiet_stderr.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace perfx::opencl {
namespace {

std::mutex g_mu;
int g_holders = 0;  // live guards that hold a reference
int g_saved = -1;   // the original fd 2 while redirected, else -1

bool verbose() {
  const char* v = std::getenv("PERFX_OPENCL_VERBOSE");
  return v && std::strcmp(v, "1") == 0;
}

}  // namespace

QuietStderr::QuietStderr() {
  if (verbose()) return;
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_holders == 0) {
    std::fflush(stderr);
    const int saved = ::dup(2);
    const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (saved < 0 || null < 0 || ::dup2(null, 2) < 0) {
      if (null >= 0) ::close(null);
      if (saved >= 0) ::close(saved);
      return;  // stderr stays as it is; this guard holds nothing
    }
    ::close(null);
    g_saved = saved;
  }
  ++g_holders;
  counted_ = true;
}

QuietStderr::~QuietStderr() {
  if (!counted_) return;
  std::lock_guard<std::mutex> lk(g_mu);
  if (--g_holders > 0) return;
  std::fflush(stderr);
  ::dup2(g_saved, 2);
  ::close(g_saved);
  g_saved = -1;
}

}  // namespace perfx::opencl
