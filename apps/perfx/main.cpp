// perfx: the command-line front end. Subcommands live one per file and register themselves.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

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

/// CLI11's message for a value that is not of its option's type ("Could not convert: --n-predict
/// = abc") as ours: "-n/--n-predict expects an integer, got 'abc'". The option is the one, among
/// those of `app` and of its parsed subcommands, whose ConversionError CLI11 would word the same
/// way; "" when none is (the caller keeps CLI11's text then).
std::string conversion_message(const CLI::App& app, const CLI::ConversionError& e) {
  std::vector<const CLI::App*> apps{&app};
  for (const CLI::App* sub : app.get_subcommands()) apps.push_back(sub);
  for (const CLI::App* a : apps)
    for (const CLI::Option* o : a->get_options()) {
      const CLI::results_t& res = o->results();
      if (res.empty() || std::string(e.what()) != CLI::ConversionError(o->get_name(), res).what())
        continue;
      const std::string type = o->get_type_name(), value = res.back();  // the last value is used
      const bool integer = type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0;
      std::string want = type.rfind("UINT", 0) == 0    ? "a non-negative integer"
                         : integer                     ? "an integer"
                         : type.rfind("FLOAT", 0) == 0 ? "a number"
                                                       : "a value of type " + type;
      std::string names = o->get_name(false, true);  // "-n,--n-predict"
      std::replace(names.begin(), names.end(), ',', '/');
      if (names.empty()) continue;  // a hidden option
      const bool digits =
          !value.empty() && value.find_first_not_of("+-0123456789") == std::string::npos;
      return names + " expects " + want + ", got '" + value + "'" +
             (integer && digits ? " (out of range)" : "");
    }
  return "";
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
  } catch (const CLI::ConversionError& e) {
    // A value that is not of the flag's type (`run -n abc`): name the flag and what it expects.
    const std::string msg = perfx::cli::conversion_message(app, e);
    if (msg.empty())
      std::fprintf(stderr, "perfx: error: %s (see perfx --help)\n", e.what());
    else
      std::fprintf(stderr, "perfx: error: %s\n", msg.c_str());
    return 1;
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
