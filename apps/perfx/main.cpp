// perfx: the command-line front end. Subcommands live one per file and register themselves.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <set>
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

/// What an option expects, in words ("an integer", "a number"), from its CLI11 type name; "" for
/// text, which any word is.
std::string expected_value(const std::string& type) {
  return type.rfind("UINT", 0) == 0    ? "a non-negative integer"
         : type.rfind("INT", 0) == 0   ? "an integer"
         : type.rfind("FLOAT", 0) == 0 ? "a number"
         : type.rfind("TEXT", 0) == 0  ? ""
                                       : "a value of type " + type;
}

/// The options of the parsed subcommands, then of `app` itself (a subcommand's flag first, should
/// one ever share a name with the main app's).
std::vector<const CLI::Option*> parsed_options(const CLI::App& app) {
  std::vector<const CLI::Option*> out;
  for (const CLI::App* sub : app.get_subcommands())
    for (const CLI::Option* o : sub->get_options()) out.push_back(o);
  for (const CLI::Option* o : app.get_options()) out.push_back(o);
  return out;
}

/// An option's flags as a user types them, "-n/--n-predict"; "" for a hidden option.
std::string option_names(const CLI::Option& o) {
  std::string names = o.get_name(false, true);  // "-n,--n-predict"
  std::replace(names.begin(), names.end(), ',', '/');
  return names;
}

/// What a numeric flag's value must look like before CLI11 converts it, which would read an empty
/// value as 0, "010" as octal 8, "0x10" as 16, "-1" for an unsigned flag as 2^64 - 1, and a value
/// past 64 bits as the largest one. Leading zeros are dropped ("010" is 10, as llama.cpp reads it);
/// everything else here is a perfx::Error "<flags> expects <what>, got '<value>'".
void check_number(const std::string& names, const std::string& type, std::string& v) {
  const bool is_unsigned = type.rfind("UINT", 0) == 0;
  const bool integer = is_unsigned || type.rfind("INT", 0) == 0;
  const std::string want = expected_value(type);
  if (v.empty()) throw Error(names + " expects " + want + ", got an empty value");
  if (!integer) return;  // a number: CLI11's conversion refuses what is not one
  const size_t sign = (v[0] == '+' || v[0] == '-') ? 1 : 0;
  const bool digits =
      v.size() > sign && v.find_first_not_of("0123456789", sign) == std::string::npos;
  if (!digits || (is_unsigned && v[0] == '-'))
    throw Error(names + " expects " + want + ", got '" + v + "'");
  const size_t first = std::min(v.find_first_not_of('0', sign), v.size() - 1);
  v.erase(sign, first - sign);  // "010" -> "10", "-007" -> "-7", "000" -> "0"
  errno = 0;
  if (is_unsigned)
    (void)std::strtoull(v.c_str(), nullptr, 10);
  else
    (void)std::strtoll(v.c_str(), nullptr, 10);
  if (errno == ERANGE) throw Error(names + " expects " + want + ", got '" + v + "' (out of range)");
}

/// Puts check_number in front of CLI11's conversion for every numeric option of `app` and of its
/// subcommands.
void check_numbers(CLI::App& app) {
  std::vector<CLI::App*> apps{&app};
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) apps.push_back(sub);
  for (CLI::App* a : apps)
    for (CLI::Option* o : a->get_options([](CLI::Option*) { return true; })) {
      const std::string type = o->get_type_name();
      if (type.rfind("INT", 0) != 0 && type.rfind("UINT", 0) != 0 && type.rfind("FLOAT", 0) != 0)
        continue;
      std::string names = option_names(*o);
      if (names.empty()) names = o->get_name();
      o->transform(CLI::Validator(  // transform: check() would drop the normalised value
          [names, type](std::string& v) {
            check_number(names, type, v);
            return std::string();
          },
          ""));
    }
}

/// CLI11's message for a value that is not of its option's type ("Could not convert: --n-predict
/// = abc") as ours: "-n/--n-predict expects an integer, got 'abc'". The option is the one, among
/// those of `app` and of its parsed subcommands, whose ConversionError CLI11 would word the same
/// way; "" when none is (the caller keeps CLI11's text then).
std::string conversion_message(const CLI::App& app, const CLI::ConversionError& e) {
  for (const CLI::Option* o : parsed_options(app)) {
    const CLI::results_t& res = o->results();
    if (res.empty() || std::string(e.what()) != CLI::ConversionError(o->get_name(), res).what())
      continue;
    const std::string names = option_names(*o);
    if (names.empty()) continue;
    const std::string type = o->get_type_name(), value = res.back();  // the last value is used
    const bool integer = type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0;
    const std::string kind = expected_value(type), want = kind.empty() ? "a value" : kind;
    const bool digits =
        !value.empty() && value.find_first_not_of("+-0123456789") == std::string::npos;
    return names + " expects " + want + ", got '" + value + "'" +
           (integer && digits ? " (out of range)" : "");
  }
  return "";
}

/// CLI11's message for a flag given without its value ("--n-predict: 1 required INT missing") as
/// ours: "-n/--n-predict needs a value (an integer)", "-m/--model needs a value". "" when the
/// message is not of that form or names no option of `app` or its parsed subcommands (the caller
/// keeps CLI11's text then).
std::string missing_value_message(const CLI::App& app, const CLI::ArgumentMismatch& e) {
  const std::string what = e.what(), tail = " missing";
  const size_t colon = what.find(": ");
  if (colon == std::string::npos || what.find(" required ", colon) == std::string::npos ||
      what.compare(what.size() - tail.size(), tail.size(), tail) != 0)
    return "";
  const std::string name = what.substr(0, colon);
  for (const CLI::Option* o : parsed_options(app)) {
    if (o->get_name() != name) continue;
    const std::string names = option_names(*o);
    if (names.empty()) continue;
    const std::string want = expected_value(o->get_type_name());
    return names + " needs a value" + (want.empty() ? "" : " (" + want + ")");
  }
  return "";
}

/// Levenshtein distance between a and b (the option a typo was meant to be).
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

/// The hint that ends a parse error: " (see perfx run --help)" for where = "perfx run".
std::string see_help(const std::string& where) {
  return " (see " + where + " --help)";
}

/// CLI11's message for arguments it could not place ("The following arguments were not expected:
/// 0.5 --tmp": reversed, with the value listed as if it were wrong too) as ours. The words are
/// CLI11's own unplaced ones (`remaining`), taken in command-line order: the first that looks like
/// a flag is named as an unknown option of the subcommand, with the nearest of its options when
/// one is within two edits ("did you mean --temp?"), and a plain word as unexpected (an unknown
/// flag's value comes after the flag, which is named first). "" when nothing can be attributed
/// (the caller keeps CLI11's text then).
std::string extras_message(const CLI::App& app, int argc, char** argv) {
  const CLI::App* sub = nullptr;
  for (const CLI::App* a : app.get_subcommands()) sub = a;
  if (sub == nullptr) return "";
  const std::string where = "perfx " + sub->get_name();
  const std::vector<std::string> rest = app.remaining(true);
  std::multiset<std::string> unplaced(rest.begin(), rest.end());
  // a flag, not a value such as -3 or -.5
  auto flag_like = [](const std::string& w) {
    return w.size() >= 2 && w[0] == '-' && !(w[1] >= '0' && w[1] <= '9') && w[1] != '.';
  };
  for (int i = 2; i < argc; ++i) {
    std::string w = argv[i];
    const auto it = unplaced.find(w);
    if (it == unplaced.end()) continue;  // CLI11 placed it (an option, or an option's value)
    unplaced.erase(it);
    if (!flag_like(w))
      return "unexpected argument '" + w + "' for '" + where + "'" + see_help(where);
    if (w == "--") return "";
    const size_t eq = w.find('=');
    if (eq != std::string::npos) w = w.substr(0, eq);
    std::string best;
    size_t best_d = 3;  // suggest within two edits
    for (const CLI::Option* o : sub->get_options())
      for (const std::string& l : o->get_lnames()) {
        const size_t d = edit_distance(w, "--" + l);
        if (d < best_d) best_d = d, best = "--" + l;
      }
    return "unknown option '" + w + "' for '" + where + "'" +
           (best.empty() ? "" : "; did you mean " + best + "?") + see_help(where);
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
  perfx::cli::check_numbers(app);
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
  // Where a parse error points: the subcommand's own help (its flags are not in perfx --help).
  const std::string help =
      perfx::cli::see_help(argv[1][0] != '-' ? std::string("perfx ") + argv[1] : "perfx");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ConversionError& e) {
    // A value that is not of the flag's type (`run -n abc`): name the flag and what it expects.
    const std::string msg = perfx::cli::conversion_message(app, e);
    if (msg.empty())
      std::fprintf(stderr, "perfx: error: %s%s\n", e.what(), help.c_str());
    else
      std::fprintf(stderr, "perfx: error: %s\n", msg.c_str());
    return 1;
  } catch (const CLI::ArgumentMismatch& e) {
    // A flag at the end without its value (`run -n`): name the flag and what it expects.
    const std::string msg = perfx::cli::missing_value_message(app, e);
    std::fprintf(stderr, "perfx: error: %s\n",
                 msg.empty() ? (std::string(e.what()) + help).c_str() : msg.c_str());
    return 1;
  } catch (const CLI::ExtrasError& e) {
    // An unknown flag or a stray word: name it, with the nearest flag (`run --tmp 0.5`).
    const std::string msg = perfx::cli::extras_message(app, argc, argv);
    std::fprintf(stderr, "perfx: error: %s\n",
                 msg.empty() ? (std::string(e.what()) + help).c_str() : msg.c_str());
    return 1;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // Unknown flags, bad values, missing options: the same one-line contract as every other error.
    std::fprintf(stderr, "perfx: error: %s%s\n", e.what(), help.c_str());
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
