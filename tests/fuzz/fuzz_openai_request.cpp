// Fuzz target: OpenAI-compatible request bodies (src/server/openai.*): the raw body through
// parse_json_body, then the same JSON through every endpoint's validator — /v1/chat/completions
// (parse_chat_request), /v1/completions (parse_completion_request), /tokenize
// (parse_tokenize_request) and /detokenize (parse_detokenize_request, vocabulary of 32000).
// Invariants: a bad body is rejected only with ApiError status 400 (anything else escaping —
// nlohmann's type_error, a SamplingError — would be a 500 or a crash); an accepted request is in
// range: n in [1, 16], logprobs in [-1, 20], max_tokens -1 or >= 1, sampling.validate() passes,
// chat messages an array, completions 1..64 prompts (token prompts non-empty), detokenize ids in
// [0, 32000).
#include <cstdint>
#include <string>

#include "fuzz_common.h"
#include "perfx/sampling.h"
#include "server/openai.h"

using namespace perfx;
using namespace perfx::server;

namespace {

void check_request(const GenerationRequest& r) {
  FUZZ_ASSERT(r.n >= 1 && r.n <= 16, "n out of range");
  FUZZ_ASSERT(r.logprobs >= -1 && r.logprobs <= 20, "logprobs out of range");
  FUZZ_ASSERT(r.max_tokens == -1 || r.max_tokens >= 1, "max_tokens out of range");
  r.sampling.validate();  // throws (escapes: a finding) if the parser let a bad value through
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  ojson j;
  try {
    j = parse_json_body(body);
  } catch (const ApiError& e) {
    FUZZ_ASSERT(e.status() == 400, "invalid JSON not answered with 400");
    (void)e.body();
    return 0;
  }
  FUZZ_ASSERT(j.is_object(), "parse_json_body accepted a non-object");
  try {
    const GenerationRequest r = parse_chat_request(j);
    check_request(r);
    FUZZ_ASSERT(r.chat && r.messages.is_array(), "chat request without a messages array");
  } catch (const ApiError& e) {
    FUZZ_ASSERT(e.status() == 400, "chat: rejected with a status other than 400");
    (void)e.body();
  }
  try {
    const GenerationRequest r = parse_completion_request(j);
    check_request(r);
    FUZZ_ASSERT(!r.prompts.empty() && r.prompts.size() <= 64, "prompt count out of range");
    for (const auto& p : r.prompts)
      FUZZ_ASSERT(!p.is_tokens || !p.ids.empty(), "empty token prompt accepted");
  } catch (const ApiError& e) {
    FUZZ_ASSERT(e.status() == 400, "completions: rejected with a status other than 400");
    (void)e.body();
  }
  try {
    const TokenizeRequest t = parse_tokenize_request(j);
    if (t.chat) check_request(t.chat_req);
  } catch (const ApiError& e) {
    FUZZ_ASSERT(e.status() == 400, "tokenize: rejected with a status other than 400");
  }
  try {
    for (int32_t id : parse_detokenize_request(j, 32000))
      FUZZ_ASSERT(id >= 0 && id < 32000, "detokenize id out of range");
  } catch (const ApiError& e) {
    FUZZ_ASSERT(e.status() == 400, "detokenize: rejected with a status other than 400");
  }
  return 0;
}
