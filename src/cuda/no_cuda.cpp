// Built when CUDA is not: the CUDA families stay in the table and refuse every call, saying why.
#include "cuda/cuda_backend.hpp"

namespace flashattn::cuda {
namespace {

template <class Params>
Status no_cuda(const Params&, Plan*) {
  return Status::unsupported("device: cuda tensors given, but flashattn was built without CUDA");
}
template <class Params>
Status never_run(const Plan&, const Params&) {
  return {StatusCode::internal, "cuda family run without a plan (built without CUDA)"};
}

}  // namespace

bool device_available() { return false; }

Status zero_rows_outside(const PackedRows*, int, void*) {
  return Status::unsupported("device: cuda tensors given, but flashattn was built without CUDA");
}

const Family& sm80_family() {
  static const Family kSm80{"sm80", Device::cuda, {no_cuda<FwdParams>, never_run<FwdParams>},
                            {no_cuda<BwdParams>, never_run<BwdParams>}, {}};
  return kSm80;
}

const Family& sm90_family() {
  static const Family kSm90{"sm90", Device::cuda, {no_cuda<FwdParams>, never_run<FwdParams>},
                            {no_cuda<BwdParams>, never_run<BwdParams>}, {}};
  return kSm90;
}

const Family& decode_family() {
  static const Family kDecode{"decode", Device::cuda, {}, {}, {no_cuda<KVCacheParams>, never_run<KVCacheParams>}};
  return kDecode;
}

}  // namespace flashattn::cuda
