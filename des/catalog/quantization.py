"""Which tensor-core path a weight format's matrix products take on a GPU, as vLLM picks it.

A quantised format either runs natively (weights and activations in the low precision, on
tensor cores that have that path) or weight-only (the weights are dequantised to bf16 in
the kernel, the product runs at bf16 FLOP/s while reading the format's bytes). vLLM's rules:

- **fp8**: native (CUTLASS ``cutlass_scaled_mm``) where the GPU has fp8 tensor cores:
  ``cutlass_fp8_supported`` in ``vllm/model_executor/layers/quantization/utils/w8a8_utils.py``
  asks ``cutlass_scaled_mm_supports_fp8(capability)``: compute capability 8.9 (Ada) and 9.0+
  (Hopper, Blackwell); ROCm runs fp8 on CDNA 3 through its own scaled-mm. Below 8.9
  ``Fp8LinearMethod`` sets ``use_marlin = not current_platform.has_device_capability(89)``
  (``quantization/fp8.py``: "For GPUs that lack FP8 hardware support, we can leverage the
  Marlin kernel for fast weight-only FP8 quantization"): w8a16 on Ampere.
- **nvfp4** (ModelOpt): ``ModelOptNvFp4LinearMethod`` (``quantization/modelopt.py``) picks
  FlashInfer/CUTLASS fp4 GEMMs where ``cutlass_fp4_supported`` (Blackwell, capability 10.0+
  and 12.0), else the Marlin fp4 kernel (``is_fp4_marlin_supported``: CUDA, capability 8.0+)
  weight-only, else raises "No valid NVFP4 GEMM backend found": no path on ROCm.
- **mxfp4**: the same split (``quantization/mxfp4.py``: native fp4 kernels on Blackwell,
  ``Mxfp4Backend.MARLIN`` weight-only on capability 8.0+ CUDA GPUs). vLLM's MXFP4 checkpoints
  quantise mixture-of-experts layers; des applies the format to every linear layer as it
  does the others.
- **int4-awq / int4-gptq**: always weight-only (``awq_marlin.py``, ``gptq_marlin.py``: Marlin,
  fp16/bf16 tensor cores); **int8**: w8a8 on int8 tensor cores, which every catalog GPU has.

The Marlin kernels need CUDA and compute capability 8.0 (Marlin README: "NVIDIA GPU with
compute capability >= 8.0"), which every NVIDIA GPU of the catalog has; AMD's CDNA 3 has
none, so an fp4 format without fp4 tensor cores there is refused.

**What weight-only costs.** Marlin reads the narrow weights at close to the memory's rate
(3.1–3.2× fp16's speed up to 16 rows in the benchmark below: the decode regime, where a
step streams its weights), but once a GEMM is compute-bound it dequantises every weight
tile again for each 64-row slab of the batch ("for batchsizes > 64, it will just run the
batch 64 kernel repeatedly", IST-DASLab/marlin#2) and reaches only part of the dense GEMM's
FLOP/s: 141 TFLOP/s on an A100 at 256 to 4,000 rows against 0.60–0.74 of cuBLAS fp16 there
(vLLM PR #2497, Marlin's bench.py), 0.82 on an RTX A6000 Ada at 16,384 rows (marlin#21).
:data:`WEIGHT_ONLY_COMPUTE` is their mean, the share of the GPU's dense GEMM rate a
weight-only kernel's products reach; the prefill-heavy steps of an int4 or
Marlin-fallback model slow by its inverse, the decode steps hardly at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from des.catalog.precision import Precision
    from des.catalog.specs import GPUSpec

#: Weight formats whose native matrix products need a tensor-core path of the GPU: the path.
NATIVE_PATH: dict[str, str] = {"fp8": "fp8", "mxfp4": "fp4", "nvfp4": "fp4"}
#: Formats that fall back to a weight-only Marlin kernel, which needs CUDA (no ROCm build).
MARLIN_FALLBACK = frozenset({"mxfp4", "nvfp4"})
#: Architectures without vLLM's Marlin kernels (not CUDA).
NO_MARLIN = frozenset({"cdna3"})
#: Formats vLLM always runs weight-only (Marlin), whatever the GPU.
WEIGHT_ONLY = frozenset({"int4-awq", "int4-gptq"})
#: Share of the dense GEMM's FLOP/s a weight-only (Marlin) kernel's products reach once
#: compute-bound: the mean of 0.74, 0.73, 0.66, 0.60, 0.61 (A100, 256-4,000 rows, vLLM PR
#: #2497) and 0.82 (RTX A6000 Ada, 16,384 rows, IST-DASLab/marlin#21).
WEIGHT_ONLY_COMPUTE = 0.69


def runs_native(gpu: GPUSpec, precision: Precision) -> bool:
    """True when ``precision``'s weight format runs on its own tensor-core path on ``gpu``."""
    path = NATIVE_PATH.get(precision.weights)
    return path is not None and path in gpu.tensor_core_paths


def compute_dtype(gpu: GPUSpec, precision: Precision) -> str:
    """Tensor-core dtype (a key of ``GPUSpec.flops``) the linear layers' products run in on
    ``gpu``: the format's own path where the GPU has it, bf16 (weight-only) where not."""
    if precision.weights in NATIVE_PATH:
        return precision.compute_dtype if runs_native(gpu, precision) else "bf16"
    return precision.compute_dtype


def weight_only(gpu: GPUSpec, precision: Precision) -> bool:
    """True when ``precision``'s weights run through a weight-only (Marlin) kernel on
    ``gpu``: int4 always, fp8 and fp4 formats on GPUs without their tensor-core path."""
    w = precision.weights
    return w in WEIGHT_ONLY or (w in NATIVE_PATH and not runs_native(gpu, precision))


def unsupported(gpu: GPUSpec, precision: Precision) -> str | None:
    """Why vLLM cannot run ``precision``'s weights on ``gpu`` (one line), or None."""
    w = precision.weights
    if w in MARLIN_FALLBACK and not runs_native(gpu, precision) and gpu.architecture in NO_MARLIN:
        return (
            f"{w} cannot run on {gpu.name}: it has no fp4 tensor cores (Blackwell) and vLLM's weight-only "
            "Marlin kernel needs CUDA (vLLM: 'No valid NVFP4 GEMM backend found'); use fp8 or int4-gptq"
        )
    return None
