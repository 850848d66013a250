#pragma once
// Several CTAs add their parts of one sum into global memory (red.add, or st.cg of their own slots);
// the last to finish reads the sums back. last_part_done, after this CTA's adds: is it the last of
// `parts` to count itself on counters[sum]? Release and acquire as CUDA's threadFenceReduction: every
// thread's fence after its own adds, the barrier, then one thread's counter atomic and a second
// fence, so that the last part's reads (ld.global.cg: from L2, which the adds reached) see every
// part's sums. A CTA-uniform answer; s_last: one int of shared memory nobody else uses now.
// The counter comes as base and index, not as a pointer: with `counters + sum` at the call site nvcc
// computed the address outside thread 0's branch and rescheduled sm80's split tail (SASS changed).

__device__ __forceinline__ bool last_part_done(int* counters, int sum, int parts, int* s_last) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    *s_last = atomicAdd(counters + sum, 1) == parts - 1;
    __threadfence();
  }
  __syncthreads();
  return *s_last;
}
