// The CPU backend: multithreaded kernels over fp32 activations; dense weights read in place, int4
// and Q8_0 weights repacked at load for int8-activation kernels (qlinear.h).
#pragma once

#include <memory>

#include "backend/backend.h"

namespace perfx::cpu {

/// n_threads <= 0: all cores. Int4 and Q8_0 weights run on int8 activations (qlinear.h) unless the
/// environment sets PERFX_ACT_QUANT=off (act_quant_enabled(), read here).
std::unique_ptr<Backend> create_cpu_backend(int n_threads);
/// Same, with the activation mode given: act_quant false = the exact fp32-activation kernels for
/// every weight (what PERFX_ACT_QUANT=off selects; tests register it as "cpu-exact").
std::unique_ptr<Backend> create_cpu_backend(int n_threads, bool act_quant);

}  // namespace perfx::cpu
