#include "server/limits.h"

#include <cstdio>

#include "perfx/status.h"

namespace perfx::server {

void check_seconds(const std::string& name, double v) {
  if (v >= 0 && v <= kMaxSeconds) return;
  char got[32];
  std::snprintf(got, sizeof got, "%g", v);
  throw Error(name + " must be 0 (no limit) to " + std::to_string((long)kMaxSeconds) +
              " seconds (a year), got " + got);
}

}  // namespace perfx::server
