// FLASHATTN_TRY(expr): evaluates a Status expression and returns it from the enclosing function
// when it is not ok — the early-return chain of the validation and dispatch code.
#pragma once

#include "flashattn/flashattn.hpp"

#define FLASHATTN_TRY(expr)            \
  do {                                 \
    ::flashattn::Status s_ = (expr);   \
    if (!s_.ok()) return s_;           \
  } while (0)
