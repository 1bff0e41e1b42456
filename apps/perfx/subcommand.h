// Subcommands register themselves (one file per subcommand); main.cpp builds the CLI from the registry.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace perfx::cli {

/// setup(app) adds the subcommand to `app` (app.add_subcommand), its options and its callback.
/// Callbacks report failures by throwing perfx::Error; main prints "perfx: error: <what>" and exits 1.
struct Subcommand {
  std::string name;
  int order;  // position in --help
  std::function<void(CLI::App&)> setup;
};

std::vector<Subcommand>& registry();

struct Register {
  Register(std::string name, int order, std::function<void(CLI::App&)> setup) {
    registry().push_back({std::move(name), order, std::move(setup)});
  }
};

/// The model used when -m is omitted: models/default in the source tree (or $PERFX_DEFAULT_MODEL).
std::string default_model_path();

}  // namespace perfx::cli
