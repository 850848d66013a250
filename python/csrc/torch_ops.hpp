// The module's switches of the PyTorch operators in torch_ops.cpp, for the nanobind side of _C.
#pragma once

#include <Python.h>

namespace flashattn::torch_ops {

// Testing aid: fill every output with NaN before the kernel runs, so an element it fails to write
// cannot pass for a correct one (flashattn/_ops.py sets it from FLASHATTN_POISON=1).
void set_poison_outputs(bool on);

// Testing aid: the operators allocate (and poison) their outputs but do not call the library, so a
// test can see what a kernel that wrote nothing would return.
void set_skip_library_calls(bool on);

// Timing aid: false allocates the backward's dq, dk, dv before the library call (as before
// gradient_allocator), so one process can time both orders (python/tools/backward_gap.py).
void set_late_gradients(bool on);

// Adds the CPython fast-call entry points (fast_call.cpp: _C.attention, _C.kvcache) to the module; 0 on
// success.
int add_fast_calls(PyObject* module);

// The StatusCode of the last error an operator raised on this thread (0 if none), so Python can
// raise flashattn's own exception class for it.
int last_error_code();

}  // namespace flashattn::torch_ops
