// perfx: the command-line front end. Subcommands live one per file and register themselves.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "perfx/status.h"
#include "subcommand.h"

namespace perfx::cli {

std::vector<Subcommand>& registry() {
  static std::vector<Subcommand> r;
  return r;
}

std::string default_model_path() {
  const char* env = std::getenv("PERFX_DEFAULT_MODEL");
  if (env && *env) return env;
  return std::string(PERFX_SOURCE_DIR) + "/models/default";
}

}  // namespace perfx::cli

int main(int argc, char** argv) {
  CLI::App app{
      "PerfXLLM: fast LLM inference (run, tokenize, quantize, perplexity, serve, bench, "
      "bench-serve)",
      "perfx"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "perfx 0.1.0");
  // A flag given twice takes its last value (as in llama.cpp), e.g. `alias p='perfx run -n 64'`.
  // Set before the subcommands are added: they copy the parent's option defaults.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  auto& reg = perfx::cli::registry();
  std::sort(reg.begin(), reg.end(), [](const auto& a, const auto& b) { return a.order < b.order; });
  for (auto& s : reg) s.setup(app);
  // A word that is not a subcommand (a typo, or `perfx bench`): name it and list the subcommands
  // (CLI11 would only say "A subcommand is required").
  std::string names;
  for (const auto& s : reg) names += (names.empty() ? "" : ", ") + s.name;
  if (argc < 2) {
    std::fprintf(stderr, "perfx: error: a subcommand is required: %s (see perfx --help)\n",
                 names.c_str());
    return 1;
  }
  if (argv[1][0] != '-' &&
      std::none_of(reg.begin(), reg.end(), [&](const auto& s) { return s.name == argv[1]; })) {
    std::fprintf(stderr,
                 "perfx: error: unknown subcommand '%s'; the subcommands are %s (see perfx "
                 "--help)\n",
                 argv[1], names.c_str());
    return 1;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // Unknown flags, bad values, missing options: the same one-line contract as every other error.
    std::fprintf(stderr, "perfx: error: %s (see perfx --help)\n", e.what());
    return 1;
  } catch (const perfx::Error& e) {
    std::fprintf(stderr, "perfx: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "perfx: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "perfx: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
