// What ops::cpu::matmul's row ranges need besides the kernel, shared with the ops that call the active path's
// matmul_rows on ranges of their own (ops::cpu::expert_group): dispatch.cpp defines them. Not for the ISA files
// (ops/cpu/kernels.h says why they share no inline code).
#pragma once

#include <cstdint>

#include "ops/cpu/kernels.h"

namespace sluice::ops::cpu {

// The active path's kernel for y[:, r0:r1] (ops::cpu_path()).
MatmulRowsFn active_matmul_rows();
// `count` fresh matmul call ids (the first returned): each a distinct x for the AMX kernel's packed inputs.
uint64_t reserve_matmul_calls(uint64_t count);
// The calling thread's kernel scratch for weights of `cols` columns (matmul_scratch_floats), 64-byte aligned:
// from malloc's large-block path a vector sits 16 bytes past a page, and then one in four of the kernels'
// 32-byte loads of decoded weights spans two cache lines. Valid until the thread's next call.
float* thread_matmul_scratch(int64_t cols);

// Marks the calling thread's kernel calls as those of matmul call `call` (t_matmul_call) while alive; reset
// even when the kernel throws.
struct MatmulCallMark {
    explicit MatmulCallMark(uint64_t c) { t_matmul_call = c; }
    ~MatmulCallMark() { t_matmul_call = 0; }
    MatmulCallMark(const MatmulCallMark&) = delete;
    MatmulCallMark& operator=(const MatmulCallMark&) = delete;
};

}  // namespace sluice::ops::cpu
