"""The output transform of a device-array call, applied on the GPU where its result is the
core's (:mod:`silvanforge.runtime.transforms`) bit for bit.

Why: a device call's rows never leave the GPU, but the transform used to: the margins were
copied to the host, transformed by NumPy and copied back, which cost more than the kernels
themselves on large calls (1M rows of a 100-tree binary XGBoost model on an H200: 2.0 ms of
kernels, 5.3 ms around them; 800 trees of softmax over 8 classes: 23 ms of kernels, 208 ms around).

Exactness, as the CPU target's small-call entry argues it (``silvanforge_target_cpu.small``):
the reference computes float32 ``exp`` in double and rounds once, then IEEE float32 operations.
The GPU does the same operations with explicitly rounded intrinsics (no contraction into FMAs).
Its double ``exp`` may differ from NumPy's in the last bit, which changes the float32 result
only where the double lies within a few units of its last place of a float32 rounding midpoint
(or is subnormal in float32); the kernels flag those values, and the float32 softmax rows with
a margin not finite, and then the call transforms on the host as before.  A softmax row's
exponentials are summed in a double in class order, as the core sums them.
float64 transforms (LightGBM, ONNX double) and the rest stay on the host.
"""

from __future__ import annotations

import numpy as np

#: CUDA C appended to every module's source: one kernel per transform, in place over the
#: margins (``n`` rows of ``k`` outputs), setting ``*flag`` where the host must redo the call.
SOURCE = r"""
// Output transforms of device-array calls (silvanforge_target_cuda.finish): float32, exact.
// Guarded: sources of several modules may be compiled as one file.
#ifndef SF_FINISH_KERNELS
#define SF_FINISH_KERNELS
__device__ __forceinline__ float sf_exp_f32(float x, int *flag) {
    double d = exp((double)x);
    // 29 low bits of the double's fraction decide the float32 rounding: near a midpoint, or a
    // float32 subnormal, another last bit of exp could round the other way.
    unsigned long long bits = (unsigned long long)__double_as_longlong(d);
    long long low = (long long)(bits & ((1ULL << 29) - 1)) - (1LL << 28);
    if ((low >= -16 && low <= 16) || (d < 1.1754943508222875e-38 && d != 0.0)) *flag = 1;
    return (float)d;
}

extern "C" __global__ void sf_finish_sigmoid(float *m, long long n, float neg_alpha, int alpha_is_one, int *flag) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = m[i];
    float z = alpha_is_one ? -x : __fmul_rn(neg_alpha, x);
    m[i] = __fdiv_rn(1.0f, __fadd_rn(1.0f, sf_exp_f32(z, flag)));
}

extern "C" __global__ void sf_finish_exp(float *m, long long n, int *flag) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    m[i] = sf_exp_f32(m[i], flag);
}

extern "C" __global__ void sf_finish_hinge(float *m, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    m[i] = m[i] > 0.0f ? 1.0f : 0.0f;
}

extern "C" __global__ void sf_finish_softmax(float *m, long long n, int k, int *flag) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float *r = m + i * (long long)k;
    float top = r[0];
    for (int j = 0; j < k; ++j) {
        float v = r[j];
        if (!isfinite(v)) { *flag = 1; return; }
        top = v > top ? v : top;
    }
    // Summed in class order, as the core's softmax sums them.
    double total = 0.0;
    for (int j = 0; j < k; ++j) {
        float e = sf_exp_f32(__fsub_rn(r[j], top), flag);
        r[j] = e;
        total += (double)e;
    }
    float t = (float)total;
    for (int j = 0; j < k; ++j) r[j] = __fdiv_rn(r[j], t);
}
#endif
"""

#: The kernels above, by name, for a module's ``get_function``.
KERNELS = ("sf_finish_sigmoid", "sf_finish_exp", "sf_finish_hinge", "sf_finish_softmax")

BLOCK = 256


def plan(transform, output_dtype, num_outputs: int):
    """(kernel name, its arguments after the margins and row count, whether it takes the flag)
    for ``transform`` on float32 margins, or None where the host applies it."""
    if transform is None or np.dtype(output_dtype) != np.float32:
        return None
    if transform.param("margin_divisor", 1.0) != 1.0:
        return None
    name = transform.name
    if name == "sigmoid":
        alpha = np.float32(transform.param("alpha", 1.0))
        return "sf_finish_sigmoid", [np.float32(-alpha), np.int32(alpha == 1)], True
    if name == "exp":
        return "sf_finish_exp", [], True
    if name == "hinge":
        return "sf_finish_hinge", [], False
    if name == "softmax" and num_outputs > 1:
        return "sf_finish_softmax", [np.int32(num_outputs)], True
    return None


def elements(kernel: str, n: int, num_outputs: int) -> int:
    """Threads a finish kernel runs: one a row for softmax, one a value otherwise."""
    return n if kernel == "sf_finish_softmax" else n * num_outputs
