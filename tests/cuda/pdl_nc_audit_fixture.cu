// Fixture of tools/lint/pdl_nc_audit.sh (ctests cuda_pdl_nc_audit_catches*): kernels that wait on
// a PDL predecessor. `reads_activation_nc` reads its input through a const __restrict__ pointer,
// which nvcc compiles to ld.global.nc — the class of §27's race (docs/cuda_linear_notes.md); the
// audit must name it. `reads_through_helper` does the same through a non-inlined function (a
// .func in the PTX, where the wait is not), which the audit must name too. `reads_weight_nc` does
// it with data marked immutable, which the audit must accept. Compiled to PTX only; never run.
#include <cuda_runtime.h>

__global__ void reads_activation_nc(const float* __restrict__ x, float* __restrict__ y, int n) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = 2.f * x[i];  // FIXTURE: unmarked
}

__device__ __noinline__ float helper_loads_nc(const float* p) { return __ldg(p); }

__global__ void reads_through_helper(const float* x, float* y, int n) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = helper_loads_nc(x + i);
}

__global__ void reads_weight_nc(const float* __restrict__ w, float* y, int n) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  // nc-ok: w stands for a weight (immutable)
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] += w[i];
}
