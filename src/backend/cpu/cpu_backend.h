// The CPU backend: multithreaded fp32 kernels over weights kept in their stored dtype.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace perfx::cpu {

/// n_threads <= 0: all cores.
std::unique_ptr<Backend> create_cpu_backend(int n_threads);

}  // namespace perfx::cpu
