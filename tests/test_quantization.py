"""Weight formats: their bytes, the tensor-core path each takes on each GPU (vLLM's rules,
des/catalog/quantization.py), what that does to step times and to the KV cache, and the
formats vLLM cannot run on a GPU."""

from __future__ import annotations

import pytest

import des
from des import catalog
from des.catalog.memory import plan_memory, weight_bytes
from des.catalog.precision import Precision
from des.catalog.quantization import WEIGHT_ONLY_COMPUTE, compute_dtype, unsupported, weight_only
from des.cost.roofline import build_roofline
from des.tools.costmodel import decode_shape, prefill_shape
from tests.helpers import des_cli

#: Bits per weight of each format, scales included: AWQ/GPTQ 4 bits plus an fp16 scale and a
#: 4-bit zero per 128 (2.5 bytes); MXFP4 4 bits plus an 8-bit scale per 32; NVFP4 4 bits plus an
#: fp8 scale per 16.
BITS = {
    "bf16": 16.0,
    "fp16": 16.0,
    "fp8": 8.0,
    "int8": 8.0,
    "int4-awq": 4 + 2.5 * 8 / 128,
    "int4-gptq": 4 + 2.5 * 8 / 128,
    "mxfp4": 4 + 8 / 32,
    "nvfp4": 4 + 8 / 16,
}


@pytest.mark.parametrize("weights", sorted(BITS))
def test_each_format_stores_its_bits_per_weight(weights):
    assert Precision(weights=weights).weight_bytes_per_param * 8 == pytest.approx(BITS[weights], rel=1e-12)
    assert BITS["mxfp4"] == 4.25 and BITS["nvfp4"] == 4.5


#: CUDA compute capability of each NVIDIA architecture of the catalog (lowest of its parts).
CAPABILITY = {"ampere": 80, "ada": 89, "hopper": 90, "blackwell": 100}


def vllm_compute(architecture: str, weights: str) -> str:
    """vLLM's choice written from its capability checks: fp8 GEMMs from capability 8.9
    (``cutlass_scaled_mm_supports_fp8``; Marlin w8a16 below), fp4 from 10.0
    (``cutlass_fp4_supported``; Marlin fp4 below); AMD's CDNA 3 has fp8 and no fp4."""
    cap = CAPABILITY.get(architecture)
    if weights == "fp8":
        return "fp8" if architecture == "cdna3" or (cap is not None and cap >= 89) else "bf16"
    if weights in ("mxfp4", "nvfp4"):
        return "fp4" if cap is not None and cap >= 100 else "bf16"
    return {"int8": "int8", "int4-awq": "fp16", "int4-gptq": "fp16", "fp16": "fp16"}.get(weights, "bf16")


@pytest.mark.parametrize("name", catalog.gpu_names())
@pytest.mark.parametrize("weights", sorted(BITS))
def test_compute_dtype_per_gpu_and_format_follows_vllms_rules(name, weights):
    gpu = catalog.gpu(name)
    assert compute_dtype(gpu, Precision(weights=weights)) == vllm_compute(gpu.architecture, weights)


def test_fp4_tensor_cores_are_blackwells_and_carry_their_flops():
    for name in catalog.gpu_names():
        gpu = catalog.gpu(name)
        assert ("fp4" in gpu.tensor_core_paths) == (gpu.architecture == "blackwell"), name
        if "fp4" in gpu.tensor_core_paths:
            assert gpu.flops["fp4"] >= 2 * gpu.flops["fp8"] * 0.99, (
                name
            )  # GeForce halves fp8 (fp32 accumulate), not fp4
    with pytest.raises(ValueError, match="tensor_cores: 'fp4' needs a flops.fp4 entry"):
        catalog.gpu("h100-80gb").model_validate({**catalog.gpu("h100-80gb").model_dump(), "tensor_cores": ["fp4"]})


def gemm(gpu: str, weights: str, shape) -> float:
    r = build_roofline(catalog.gpu(gpu), catalog.model("llama-3.1-8b"), Precision.model_validate({"weights": weights}))
    return r.breakdown(shape)["gemm"]


@pytest.mark.parametrize("gpu", ["a100-80gb", "h100-80gb"])
@pytest.mark.parametrize("weights", ["int4-awq", "int4-gptq"])
def test_int4_gemms_gain_the_weight_bytes_ratio_at_batch_1_and_lose_it_at_large_batch(gpu, weights):
    """Within 2 %: the roofline's soft knee blends in the padded batch's FLOPs at batch 1 and
    the weight read at 32768 tokens. The GEMM kernels' fixed time (gemm_fixed, the same
    kernels' launch and tail whatever the weights' format) is left out of the batch-1 ratio."""
    ratio = Precision(weights=weights).weight_bytes_per_param / 2.0
    fixed = build_roofline(catalog.gpu(gpu), catalog.model("llama-3.1-8b")).gemm_fixed_s
    assert fixed > 0  # fitted to vLLM's GEMM kernels on these GPUs
    small = (gemm(gpu, weights, decode_shape(1, 512)) - fixed) / (gemm(gpu, "bf16", decode_shape(1, 512)) - fixed)
    assert small == pytest.approx(ratio, rel=0.02)
    big = prefill_shape(32768)  # compute-bound: Marlin runs bf16 tensor cores at part of their rate
    assert gemm(gpu, weights, big) / gemm(gpu, "bf16", big) == pytest.approx(1 / WEIGHT_ONLY_COMPUTE, rel=0.02)
    assert gemm(gpu, weights, big) / gemm(gpu, "bf16", big) > 3 * small


def test_fp8_weights_speed_up_large_batches_only_where_fp8_tensor_cores_are():
    big = prefill_shape(32768)  # within 2 %: the soft knee blends in the (halved) weight read
    marlin = 1 / WEIGHT_ONLY_COMPUTE  # fp8 on Ampere, fp4 before Blackwell: weight-only Marlin
    assert gemm("a100-80gb", "fp8", big) == pytest.approx(marlin * gemm("a100-80gb", "bf16", big), rel=0.02)
    assert gemm("h100-80gb", "fp8", big) < 0.6 * gemm("h100-80gb", "bf16", big)
    assert gemm("b200", "nvfp4", big) < 0.6 * gemm("b200", "fp8", big)
    assert gemm("h100-80gb", "nvfp4", big) == pytest.approx(marlin * gemm("h100-80gb", "bf16", big), rel=0.02)


@pytest.mark.parametrize(
    "gpu, weights, expected",
    [
        ("rtx4090", "int4-awq", True), ("h100-80gb", "int4-gptq", True), ("rtx4090", "fp8", False),
        ("a100-80gb", "fp8", True), ("rtx4090", "mxfp4", True), ("b200", "mxfp4", False), ("h100-80gb", "bf16", False),
        ("a100-80gb", "int8", False),
    ],
)  # fmt: skip
def test_weight_only_kernels_are_the_ones_vllm_runs_through_marlin(gpu, weights, expected):
    assert weight_only(catalog.gpu(gpu), Precision(weights=weights)) is expected


def test_the_weight_only_share_is_the_mean_of_the_kernel_measurements():
    # Marlin against cuBLAS fp16 once compute-bound: vLLM PR #2497 (A100: 256, 512, 1024,
    # 2048, 4000 rows) and IST-DASLab/marlin#21 (RTX A6000 Ada, 16,384 rows)
    measured = [0.74, 0.73, 0.66, 0.60, 0.61, 0.82]
    assert round(sum(measured) / len(measured), 2) == WEIGHT_ONLY_COMPUTE


def test_kv_capacity_grows_as_weights_shrink_with_embeddings_and_head_in_bf16():
    gpu, model = catalog.gpu("rtx4090"), catalog.model("llama-3.1-8b")
    blocks = []
    for weights in ("bf16", "fp8", "nvfp4", "mxfp4", "int4-awq"):
        p = Precision(weights=weights)
        linear = model.num_layers * model.layer_linear_params
        expect = linear * p.weight_bytes_per_param + (model.num_params - linear) * 2.0
        assert weight_bytes(model, p) == round(expect)
        plan = plan_memory(gpu, model, precision=p, gpu_memory_utilization=0.9)
        assert plan.weights >= weight_bytes(model, p)
        blocks.append(plan.num_blocks)
    assert blocks == sorted(blocks) and len(set(blocks)) == len(blocks), blocks


WORKLOAD = {
    "arrival": {"process": "poisson", "rate": 1.0},
    "prompt_tokens": {"dist": "geometric", "mean": 100},
    "output_tokens": {"dist": "geometric", "mean": 10},
}


def test_a_format_vllm_cannot_run_on_the_gpu_is_one_clear_error(tmp_path):
    assert unsupported(catalog.gpu("a100-80gb"), Precision(weights="nvfp4")) is None  # Marlin fp4
    with pytest.raises(des.ScenarioError) as info:
        des.load_scenario(
            {"gpu": "mi300x", "precision": {"weights": "nvfp4"}, "horizon": {"duration": 10}, "workload": WORKLOAD}
        )
    ((path, message),) = info.value.problems
    assert path == "precision.weights" and "nvfp4" in message and "mi300x" in message and "\n" not in message
    done = des_cli("costmodel", "--gpu", "mi300x", "--weights", "mxfp4")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: --weights: " + unsupported(catalog.gpu("mi300x"), Precision(weights="mxfp4"))  # type: ignore[operator]
    ]
