#include "model/model_test_util.h"

#include <cmath>
#include <cstring>

#include "backend/backend.h"
#include "formats/safetensors.h"
#include "model/llama.h"
#include "model/weights.h"
#include "perfx/status.h"
#include "runtime/kv_cache.h"
#include "support/test_support.h"

namespace perfx::test {

PromptedSequences start_sequences(Engine& e, const std::vector<std::vector<int32_t>>& prompts,
                                  const SamplingParams& sp) {
  PromptedSequences b;
  b.samplers.assign(prompts.size(), Sampler(sp));
  b.items.resize(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    b.seqs.push_back(e.create_sequence());
    b.items[i].seq = b.seqs.back();
    b.items[i].tokens = prompts[i];
    b.items[i].sampler = &b.samplers[i];
  }
  return b;
}

std::vector<float> greedy_step_logits(Engine& e, const std::vector<std::vector<int32_t>>& prompts,
                                      int n) {
  SamplingParams sp;
  sp.temperature = 0;
  PromptedSequences b = start_sequences(e, prompts, sp);
  for (auto& it : b.items) it.copy_logits = true;
  std::vector<float> all;
  Engine::StepResult r;
  for (int s = 0; s < n; ++s) {
    e.step(b.items, r);
    all.insert(all.end(), r.logits.begin(), r.logits.end());
    for (size_t i = 0; i < b.items.size(); ++i) b.items[i].tokens = {r.tokens[i]};
  }
  b.release(e);
  return all;
}

std::vector<float> model_logits(const std::string& path, const std::vector<int32_t>& ids,
                                int64_t* vocab, const std::string& device, const ModelOptions& mo) {
  return model_logits(open_checkpoint(path), ids, vocab, device, mo);
}

std::vector<float> model_logits(const Checkpoint& ck, const std::vector<int32_t>& ids,
                                int64_t* vocab, const std::string& device, const ModelOptions& mo) {
  auto be = create_backend(device, 2);
  LlamaModel model(ck, *be, mo);
  const auto& c = model.config();
  const int bs = 16;
  const int n_blocks = ((int)ids.size() + bs - 1) / bs;
  BlockManager bm(n_blocks, bs);
  auto kv = be->create_kv((int)c.num_hidden_layers, n_blocks, bs, (int)c.num_key_value_heads, (int)c.head_dim);
  bm.add_sequence(1);
  BatchLayout b;
  b.n_tokens = (int)ids.size();
  b.token_ids = ids;
  b.slots = bm.append(1, ids);
  for (int i = 0; i < b.n_tokens; ++i) {
    b.positions.push_back(i);
    b.token_seq.push_back(0);
    b.logit_rows.push_back(i);
  }
  b.n_seqs = 1;
  b.block_tables = bm.block_table(1);
  b.max_blocks = (int)b.block_tables.size();
  std::vector<float> logits;
  model.forward(b, *kv, logits);
  *vocab = c.vocab_size;
  return logits;
}

std::vector<std::string> non_cpu_test_devices() {
  std::vector<std::string> d = {"f16-ref"};
  for (const auto& e : env_test_devices())
    if (e != "cpu" && e != "f16-ref") d.push_back(e);
  return d;
}

std::vector<std::string> all_test_devices() {
  std::vector<std::string> d = {"cpu"};
  for (const auto& x : non_cpu_test_devices()) d.push_back(x);
  return d;
}

void read_reference(const std::string& path, std::vector<int32_t>* ids, std::vector<float>* logits,
                    int64_t* vocab) {
  auto f = SafetensorsFile::open(path);
  const TensorView* in = f->find("input_ids");
  const TensorView* lg = f->find("logits");
  check(in && lg, "reference file lacks input_ids/logits: " + path);
  check(in->dtype == DType::I32 || in->dtype == DType::I64, "input_ids must be I32 or I64");
  ids->resize((size_t)in->numel());
  for (int64_t i = 0; i < in->numel(); ++i) {
    if (in->dtype == DType::I32) {
      std::memcpy(&(*ids)[i], static_cast<const char*>(in->data) + 4 * i, 4);
    } else {
      int64_t v;
      std::memcpy(&v, static_cast<const char*>(in->data) + 8 * i, 8);
      (*ids)[i] = (int32_t)v;
    }
  }
  check(lg->dtype == DType::F32, "logits must be F32");
  logits->resize((size_t)lg->numel());
  std::memcpy(logits->data(), lg->data, lg->nbytes);
  *vocab = lg->shape.back();
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

}  // namespace perfx::test
