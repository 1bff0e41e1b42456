// The CUDA backend (cuda_backend_impl.h): sampling — penalties, argmax and the softmax / top-k
// draws on the GPU (sample.cu), the argmax inside a decode graph, the ids' copy to the host.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "backend/cpu/sampling.h"
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/kernels.h"

namespace perfx::cuda::backend_impl {

void CudaBackend::sample(Tensor logits, const std::vector<SampleRow>& rows, int32_t* ids) {
  OpScope scope(*this, profile_ ? "sample" : "");
  check_sample_rows(logits, rows);
  std::vector<RowState> state(rows.size(), RowState::Host);
  if (graph_argmax(logits, rows)) {  // launched into the graph: before finish_forward
    finish_forward();
    SampleJob job = copy_step_ids((int)rows.size());
    cuda_ok(cudaEventSynchronize(slots_[job.slot].done), "sample");
    sample_collect(job, ids, state);
  } else {
    finish_forward();
    SampleJob job;
    if (sample_enqueue(logits, rows, job)) {
      cuda_ok(cudaEventSynchronize(slots_[job.slot].done), "sample");
      sample_collect(job, ids, state);
    }
  }
  // The other rows travel to the host and the reference sampler picks (same draws as the CPU
  // backend); a row the GPU handed back (−1: a NaN or +inf the reference's check names, or a
  // top-k cut the kernel cannot make) already carries its penalties.
  std::vector<float> row((size_t)logits.cols);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (state[i] == RowState::Picked) continue;
    const SampleRow* r = &rows[i];
    SampleRow plain;
    if (state[i] == RowState::Penalized) {
      plain = rows[i];
      plain.repeat_penalty = 1.0f;
      plain.presence_penalty = plain.frequency_penalty = 0.0f;
      r = &plain;
    }
    to_host(row.data(), logits.rows_view(r->row, 1).data, row.size() * 4);
    ids[i] = cpu::sample_logits(row.data(), (int)logits.cols, *r, sample_scratch_);
  }
}

void CudaBackend::check_sample_rows(const Tensor& logits, const std::vector<SampleRow>& rows) {
  PERFX_CHECK(logits.dtype == DType::F32, "sample: logits must be F32");
  for (const auto& r : rows)
    PERFX_CHECK(r.row >= 0 && r.row < logits.rows, "sample: row out of range");
}

void CudaBackend::sample_begin(Tensor logits, const std::vector<SampleRow>& rows) {
  OpScope scope(*this, "");  // untimed: its fallback calls sample(), which is timed
  PERFX_CHECK(pending_.size() < 2, "sample_begin: two samples are already outstanding");
  for (const auto& r : rows)
    PERFX_CHECK(samples_ahead_row(r),
                "sample_begin: a row with top-k / top-p / min-p or penalties (use sample)");
  check_sample_rows(logits, rows);
  if (graph_argmax(logits, rows)) {
    finish_forward();
    SampleJob job = copy_step_ids((int)rows.size());
    fed_d_ = job.out_d;
    fed_n_ = (int)rows.size();
    pending_.push_back(std::move(job));
    return;
  }
  finish_forward();
  bool greedy = false, drawn = false;
  for (const auto& r : rows) (r.temperature <= 0 ? greedy : drawn) = true;
  SampleJob job;
  if ((greedy && drawn) || !sample_enqueue(logits, rows, job)) {
    // The kernels write greedy ids before drawn ones, so a mix of the two is not in row order
    // (and PERFX_CUDA_GPU_SAMPLING=0 draws on the host): pick now, upload the ids to feed.
    job = SampleJob{};
    job.ids.resize(rows.size());
    sample(logits, rows, job.ids.data());
    job.ready = true;
    SampleSlot& sl = slot_for(rows.size() * 4, job.slot);
    std::memcpy(sl.host, job.ids.data(), rows.size() * 4);
    cuda_ok(
        cudaMemcpyAsync(sl.dev.get(), sl.host, rows.size() * 4, cudaMemcpyHostToDevice, stream_),
        "sampled ids");
    cuda_ok(cudaEventRecord(sl.done, stream_), "cudaEventRecord");
    job.out_d = static_cast<const int32_t*>(sl.dev.get());
  }
  fed_d_ = job.out_d;
  fed_n_ = (int)rows.size();
  job.n_rows = rows.size();
  pending_.push_back(std::move(job));
}

void CudaBackend::sample_end(int32_t* ids) {
  use_device();
  PERFX_CHECK(!pending_.empty(), "sample_end: no sample_begin is outstanding");
  SampleJob job = std::move(pending_.front());
  pending_.pop_front();
  if (job.ready) {
    std::copy(job.ids.begin(), job.ids.end(), ids);
    return;
  }
  cuda_ok(cudaEventSynchronize(slots_[job.slot].done), "sample (a kernel of the step failed)");
  std::vector<RowState> state(job.n_rows, RowState::Host);
  sample_collect(job, ids, state);
  // sample_begin takes only rows the kernels always pick (greedy, or a temperature without
  // truncation or penalties), so a −1 is their broken-row mark (logit_check.cuh). The logits may
  // already hold the next step's, so the row is named, not the token id as the host sampler does.
  for (size_t i = 0; i < state.size(); ++i) {
    PERFX_CHECK(state[i] != RowState::Host, "sample_end: a row no kernel sampled");
    if (state[i] == RowState::Penalized)  // the kernels' −1
      throw Error("the model's logits are not finite (a NaN or +inf in sampled row " +
                  std::to_string(i) + " of the step): its weights are corrupt or its activations " +
                  "overflowed");
  }
}

CudaBackend::SampleSlot& CudaBackend::slot_for(size_t bytes, int& index) {
  index = next_slot_;
  auto held = [&](int i) {
    for (const SampleJob& j : pending_)
      if (!j.ready && j.slot == i) return true;
    return false;
  };
  if (held(index)) index ^= 1;
  PERFX_CHECK(!held(index),
              "sample: two outstanding sample_begin draws hold both sampling "
              "slots (call sample_end first)");
  next_slot_ = index ^ 1;
  SampleSlot& sl = slots_[index];
  if (!sl.done)
    cuda_ok(cudaEventCreateWithFlags(&sl.done, cudaEventDisableTiming), "cudaEventCreate");
  cuda_ok(cudaEventSynchronize(sl.done), "sample");  // its previous copies have run
  if (bytes > sl.cap) {
    const size_t cap = std::max(bytes, sl.cap * 2);
    cuda_ok(sync_streams(), "sample");  // nothing queued reads the old buffers
    if (sl.host) (void)cudaFreeHost(sl.host);
    sl.host = nullptr;
    sl.cap = 0;
    cuda_ok(cudaHostAlloc(&sl.host, cap, cudaHostAllocDefault), "cudaHostAlloc");
    sl.dev.alloc(cap, "sampling");
    sl.cap = cap;
  }
  return sl;
}

bool CudaBackend::graph_argmax(const Tensor& logits, const std::vector<SampleRow>& rows) {
  static const bool on = env_switch("PERFX_CUDA_GRAPH_ARGMAX");
  if (!on || !graph_step_ || state_ == State::Eager || (int)rows.size() != n_tokens_) return false;
  for (size_t i = 0; i < rows.size(); ++i)  // greedy, no penalties, row i for token i
    if (rows[i].row != (int)i || rows[i].temperature > 0 || !samples_ahead_row(rows[i]))
      return false;
  if (state_ == State::Replaying) return replay_argmax_;
  launch_argmax(logits.f32(), logits.stride, static_cast<const int32_t*>(step_rows_.get()),
                n_tokens_, (int)logits.cols, ids_out_, stream_);
  launched("argmax (in the graph)");
  capture_argmax_ = true;
  return true;
}

CudaBackend::SampleJob CudaBackend::copy_step_ids(int n) {
  SampleJob job;
  SampleSlot& sl = slot_for((size_t)n * 4 + 64, job.slot);
  cudaStream_t st = stream_;
  if (aside_) {
    cuda_ok(cudaEventRecord(fwd_done_, stream_), "cudaEventRecord");
    cuda_ok(cudaStreamWaitEvent(copy_stream_, fwd_done_, 0), "cudaStreamWaitEvent");
    st = copy_stream_;
  }
  if (!(skip_ & kSkipIds))  // PERFX_CUDA_SKIP=ids (timing only): the host reads stale ids
    cuda_ok(cudaMemcpyAsync(sl.host, ids_out_, (size_t)n * 4, cudaMemcpyDeviceToHost, st),
            "sampled ids");
  cuda_ok(cudaEventRecord(sl.done, st), "cudaEventRecord");
  if (aside_)  // ids_out_ is ids_[par_ ^ 1] (prepare_batch)
    cuda_ok(cudaEventRecord(ids_copied_[par_ ^ 1], st), "cudaEventRecord");
  job.out_d = ids_out_;
  job.n_rows = (size_t)n;
  for (int i = 0; i < n; ++i) job.greedy_at.push_back((size_t)i);
  return job;
}

void CudaBackend::sample_collect(const SampleJob& job, int32_t* ids, std::vector<RowState>& state) {
  const int32_t* got =
      reinterpret_cast<const int32_t*>(static_cast<const char*>(slots_[job.slot].host) + job.o_out);
  auto take = [&](const std::vector<size_t>& at, size_t first) {
    for (size_t i = 0; i < at.size(); ++i) {
      const int32_t id = got[first + i];
      state[at[i]] = id >= 0 ? RowState::Picked : RowState::Penalized;
      if (id >= 0) ids[at[i]] = id;
    }
  };
  take(job.greedy_at, 0);
  take(job.soft_at, job.greedy_at.size());
  take(job.topk_at, job.greedy_at.size() + job.soft_at.size());
}

bool CudaBackend::sample_enqueue(const Tensor& logits, const std::vector<SampleRow>& rows,
                                 SampleJob& job) {
  static const bool gpu_draws = [] {
    const char* e = std::getenv("PERFX_CUDA_GPU_SAMPLING");
    return !(e && std::string(e) == "0");
  }();
  const int V = (int)logits.cols;
  std::vector<int32_t> greedy_rows;
  std::vector<size_t>&greedy_at = job.greedy_at, &soft_at = job.soft_at, &topk_at = job.topk_at;
  std::vector<SampleDraw> soft;
  std::vector<SampleDrawTopK> topk;
  std::vector<PenaltyEntry> pen;
  for (size_t i = 0; i < rows.size(); ++i) {
    const SampleRow& r = rows[i];
    const bool truncated = (r.top_k > 0 && r.top_k < V) || r.top_p < 1.0f || r.min_p > 0.0f;
    if (r.temperature <= 0) {
      greedy_rows.push_back(r.row);
      greedy_at.push_back(i);
    } else if (!gpu_draws) {
      continue;
    } else if (!truncated) {
      soft.push_back(SampleDraw{r.u, r.temperature, r.row});
      soft_at.push_back(i);
    } else if (r.top_k <= 1024 || r.top_k >= V) {  // top-k 1..1024, or top-p / min-p alone
      const int k = r.top_k > 0 && r.top_k < V ? r.top_k : 0;
      topk.push_back(SampleDrawTopK{r.u, r.temperature, r.top_p, r.min_p, k, r.row});
      topk_at.push_back(i);
    } else {
      continue;
    }
    std::map<int32_t, PenaltyEntry> merged;
    if (r.repeat_penalty != 1.0f)
      for (int32_t id : r.repeat_ids)
        if (id >= 0 && id < V) merged[id] = PenaltyEntry{r.row, id, r.repeat_penalty, 0.0f};
    if (r.presence_penalty != 0.0f || r.frequency_penalty != 0.0f)
      for (const auto& [id, cnt] : r.counts) {
        if (id < 0 || id >= V) continue;
        auto it = merged.emplace(id, PenaltyEntry{r.row, id, 1.0f, 0.0f}).first;
        it->second.subtract = r.presence_penalty + r.frequency_penalty * (float)cnt;
      }
    for (const auto& [id, e] : merged) pen.push_back(e);
  }
  const size_t n_greedy = greedy_rows.size(), n_soft = soft.size(), n_topk = topk.size();
  const size_t n_out = n_greedy + n_soft + n_topk;
  if (n_out == 0) return false;
  // staging: penalties | softmax draws | top-k draws (both 16-byte aligned) | greedy rows |
  // ids out (greedy, softmax, top-k)
  const size_t o_soft = (pen.size() * sizeof(PenaltyEntry) + 15) & ~size_t(15);
  const size_t o_topk = o_soft + n_soft * sizeof(SampleDraw);
  const size_t o_rows = o_topk + n_topk * sizeof(SampleDrawTopK);
  const size_t o_out = o_rows + n_greedy * 4;
  SampleSlot& sl = slot_for(o_out + n_out * 4 + 64, job.slot);
  char* h = static_cast<char*>(sl.host);
  char* d = static_cast<char*>(sl.dev.get());
  std::memcpy(h, pen.data(), pen.size() * sizeof(PenaltyEntry));
  std::memcpy(h + o_soft, soft.data(), n_soft * sizeof(SampleDraw));
  std::memcpy(h + o_topk, topk.data(), n_topk * sizeof(SampleDrawTopK));
  std::memcpy(h + o_rows, greedy_rows.data(), n_greedy * 4);
  cuda_ok(cudaMemcpyAsync(d, h, o_out, cudaMemcpyHostToDevice, stream_), "upload sampling rows");
  int32_t* out = reinterpret_cast<int32_t*>(d + o_out);
  launch_penalties(logits.f32(), logits.stride, reinterpret_cast<const PenaltyEntry*>(d),
                   (int)pen.size(), stream_);
  launch_argmax(logits.f32(), logits.stride, reinterpret_cast<const int32_t*>(d + o_rows),
                (int)n_greedy, V, out, stream_);
  launch_sample_softmax(logits.f32(), logits.stride,
                        reinterpret_cast<const SampleDraw*>(d + o_soft), (int)n_soft, V,
                        out + n_greedy, stream_);
  launch_sample_top_k(logits.f32(), logits.stride,
                      reinterpret_cast<const SampleDrawTopK*>(d + o_topk), (int)n_topk, V,
                      out + n_greedy + n_soft, stream_);
  cuda_ok(cudaGetLastError(), "sample (argmax, draws)");
  cuda_ok(cudaMemcpyAsync(h + o_out, out, n_out * 4, cudaMemcpyDeviceToHost, stream_),
          "sampled ids");
  cuda_ok(cudaEventRecord(sl.done, stream_), "cudaEventRecord");
  job.o_out = o_out;
  job.out_d = out;
  return true;
}

}  // namespace perfx::cuda::backend_impl
