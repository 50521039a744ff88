// The GLU and dGLU launchers: the activation picks the translation unit that holds its kernels.
#include "sm90/instances.hpp"

#include "sm90/params.cuh"

namespace moegemm::sm90 {

template <ActKind kAct>
void launch_glu_act(const KernelParams& p, int block_n, Schedule schedule, BLayout layout, int grid,
                    cudaStream_t stream);
template <ActKind kAct>
void launch_dglu_act(const KernelParams& p, int block_n, Schedule schedule, BLayout layout, int grid,
                     cudaStream_t stream);

void launch_glu(const KernelParams& p, int block_n, Schedule schedule, BLayout layout, int grid,
                cudaStream_t stream) {
  switch (p.act) {
    case ActKind::swiglu: return launch_glu_act<ActKind::swiglu>(p, block_n, schedule, layout, grid, stream);
    case ActKind::geglu: return launch_glu_act<ActKind::geglu>(p, block_n, schedule, layout, grid, stream);
    case ActKind::swiglu_clamped: return launch_glu_act<ActKind::swiglu_clamped>(p, block_n, schedule, layout, grid, stream);
  }
}

void launch_dglu(const KernelParams& p, int block_n, Schedule schedule, BLayout layout, int grid,
                 cudaStream_t stream) {
  switch (p.act) {
    case ActKind::swiglu: return launch_dglu_act<ActKind::swiglu>(p, block_n, schedule, layout, grid, stream);
    case ActKind::geglu: return launch_dglu_act<ActKind::geglu>(p, block_n, schedule, layout, grid, stream);
    case ActKind::swiglu_clamped: return launch_dglu_act<ActKind::swiglu_clamped>(p, block_n, schedule, layout, grid, stream);
  }
}

}  // namespace moegemm::sm90
