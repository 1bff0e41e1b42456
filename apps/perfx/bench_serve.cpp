// perfx bench-serve: load generator for OpenAI-compatible servers (perfx serve, llama-server, ...).
#include <cstdio>
#include <fstream>

#include "common.h"
#include "perfx/status.h"
#include "server/limits.h"
#include "server/load_generator.h"
#include "subcommand.h"

namespace perfx::cli {
namespace {

struct BenchServeArgs {
  std::string url = "http://127.0.0.1:8080", json_out, label;
  server::LoadOptions load;
  bool no_ignore_eos = false, same_prompt = false;  // the flags; load holds their negations
};

void bench_serve(BenchServeArgs a) {
  if (a.no_ignore_eos) a.load.ignore_eos = false;
  if (a.same_prompt) a.load.unique_prompts = false;
  server::parse_server_url(a.url, a.load.host, a.load.port);
  check(a.load.warmup >= 0, "--warmup must be >= 0");
  check(a.load.temperature >= 0, "--temperature must be >= 0");
  // 1e300 s overflowed the deadline: no request was issued.
  server::check_seconds("--duration", a.load.duration_s);
  check(a.load.clients >= 1 && a.load.clients <= 4096,
        "-c/--clients must be 1..4096, got " + std::to_string(a.load.clients));
  std::fprintf(stderr,
               "perfx bench-serve: %s, %d clients, %d requests / %.0f s, prompt %d tokens%s, %s%d "
               "output tokens%s\n",
               a.url.c_str(), a.load.clients, a.load.requests, a.load.duration_s,
               a.load.prompt_tokens, a.load.unique_prompts ? "" : " (one prompt for all)",
               a.load.ignore_eos ? "" : "up to ", a.load.max_tokens,
               a.load.ignore_eos ? "" : " (stops at EOS)");
  server::LoadReport r = server::run_load(a.load);
  std::printf("%s", r.to_text().c_str());
  if (!a.json_out.empty()) {
    nlohmann::json j = r.to_json();
    if (!a.label.empty()) j["label"] = a.label;
    std::ofstream f(a.json_out);
    f << j.dump(2) << "\n";
    check((bool)f, "cannot write --json file '" + a.json_out + "'");
  }
  check(r.completed > 0,
        "no request succeeded" + (r.first_error.empty() ? std::string() : ": " + r.first_error));
  check(!a.load.check || (r.failed == 0 && r.wrong == 0),
        "--check: " + std::to_string(r.failed) + " failed, " + std::to_string(r.wrong) +
            " wrong responses");
}

static Register reg("bench-serve", 55, [](CLI::App& app) {
  auto a = std::make_shared<BenchServeArgs>();
  auto* sub = app.add_subcommand(
      "bench-serve", "Load-test an OpenAI-compatible server: N concurrent streaming clients");
  sub->add_option("--url", a->url, "server (default http://127.0.0.1:8080)");
  sub->add_option("--api-key", a->load.api_key, "sent as 'Authorization: Bearer KEY'");
  sub->add_option("--model", a->load.model, "\"model\" field (default: none sent)");
  sub->add_option("-c,--clients", a->load.clients, "concurrent clients (default 8)");
  sub->add_option("--requests", a->load.requests,
                  "requests in all (default 64; 0: until --duration)");
  sub->add_option("--duration", a->load.duration_s,
                  "stop issuing requests after S seconds (default 120; 0: no limit)");
  sub->add_option("--prompt-tokens", a->load.prompt_tokens,
                  "prompt length in tokens (default 128)");
  sub->add_option("--max-tokens", a->load.max_tokens, "output tokens per request (default 128)");
  sub->add_flag("--chat", a->load.chat, "use /v1/chat/completions (default /v1/completions)");
  sub->add_option("--temperature", a->load.temperature, "sampling temperature (default 0)");
  sub->add_flag("--no-ignore-eos", a->no_ignore_eos,
                "stop at EOS instead of generating exactly --max-tokens");
  sub->add_option("--disconnect-fraction", a->load.disconnect_fraction,
                  "this share of the requests closes its stream after half the output (default 0)");
  sub->add_flag("--check", a->load.check,
                "check every completed response's usage and finish_reason; exit 1 on a wrong one "
                "or a failed request");
  sub->add_flag("--compare-solo", a->load.compare_solo,
                "serve each request's prompt alone first and report how many responses equal it "
                "(needs --requests and --temperature 0)");
  sub->add_option("--warmup", a->load.warmup, "unmeasured requests first (default 1)");
  sub->add_flag("--same-prompt", a->same_prompt,
                "send one prompt to all requests (default: each starts differently, so no "
                "prefix-cache hits)");
  sub->add_option("--json", a->json_out, "also write the results as JSON to this file");
  sub->add_option("--label", a->label, "name recorded in the JSON (e.g. perfx, llama-server)");
  sub->callback([a] { bench_serve(*a); });
});

}  // namespace
}  // namespace perfx::cli
