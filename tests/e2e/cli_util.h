// Runs the perfx binary as a user would and captures exit code, stdout and stderr.
#pragma once

#include <string>

#include "support/test_support.h"

namespace perfx::test {

struct CmdResult {
  int exit_code = -1;
  std::string out, err;
};

/// Runs `PERFX_BIN <args>` through /bin/sh (args are shell words; quote as needed). timeout_s > 0:
/// killed (SIGKILL) after that many seconds, exit_code then 137.
CmdResult run_perfx(const std::string& args, int timeout_s = 0);
/// run_perfx under `ulimit -v vmem_kib` (a container's address-space limit) with one malloc arena
/// (so the threads' arenas do not use the limit up first): a large allocation fails as it would on
/// such a host. Not under AddressSanitizer, which reserves terabytes of address space.
CmdResult run_perfx_within(long vmem_kib, const std::string& args, int timeout_s = 0);
/// A fresh directory /tmp/perfx-TAG-XXXXXX, removed with its contents when the test process exits
/// normally (a forked child that exits leaves it alone).
std::string make_temp_dir(const std::string& tag);
/// Shell-quotes a string.
std::string sh_quote(const std::string& s);
void write_file(const std::string& path, const std::string& data);

/// The bundled default model folder (<source>/models/default).
inline std::string default_model() { return source_dir() + "/models/default"; }

/// Skips the test (with the path) when models/default is missing.
#define REQUIRE_DEFAULT_MODEL()                                                \
  do {                                                                         \
    if (!path_exists_for_test(default_model() + "/config.json"))               \
      GTEST_SKIP() << "models/default is missing (" << default_model() << ")"; \
  } while (0)

}  // namespace perfx::test
