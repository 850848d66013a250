// The sm80 family (the portable tensor-core path) and its instance registry.
#include "cuda/cuda_backend.hpp"
#include "cuda/ptx/mma.cuh"
#include "cuda/sm80/bwd_launch.hpp"
#include "cuda/sm80/fwd_launch.hpp"
#include "cuda/sm80/instances.hpp"
#include "sm80/instances.h"

namespace flashattn::cuda {
namespace sm80 {
namespace {

#define FLASHATTN_SM80_INSTANCE(D)                                                              \
  Instance{D,                                                                                    \
           {&fwd_run<ptx::F16, D>, &fwd_run<ptx::BF16, D>},                                      \
           {&fwd_device_check<ptx::F16, D>, &fwd_device_check<ptx::BF16, D>},                    \
           {&launch_bwd_main<ptx::F16, D>, &launch_bwd_main<ptx::BF16, D>},                      \
           {&check_bwd_main_image<ptx::F16, D>, &check_bwd_main_image<ptx::BF16, D>}},
const Instance kInstances[] = {FLASHATTN_SM80_HEADDIMS(FLASHATTN_SM80_INSTANCE)};
#undef FLASHATTN_SM80_INSTANCE

}  // namespace

const Instance* find_instance(int64_t head_dim) { return smallest_instance_holding(kInstances, head_dim); }

const char* compiled_head_dims() { return FLASHATTN_SM80_HEADDIMS_STRING; }

}  // namespace sm80

const Family& sm80_family() {
  static const Family kSm80{"sm80", Device::cuda, {sm80::plan_forward, sm80::run_forward},
                            {sm80::plan_backward, sm80::run_backward}, {}};
  return kSm80;
}

}  // namespace flashattn::cuda
