"""The serving front-end (``serving.frontend``): its CPU time per step and per sequence, where
that time goes (the engine core's thread, overlapping the GPU under async scheduling, or the
API server's own process, a floor on the step), the requests' ingress time, closed-loop
clients' turnaround, and the errors of a bad ``serving`` section."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

import des
from des import catalog
from des.cost.base import BatchShape
from des.cost.frontend import FRONTENDS, Serving
from des.cost.roofline import Engine, build_roofline
from des.workload.client import CLIENTS
from tests.helpers import des_cli

G, M = catalog.gpu("rtx4090"), catalog.model("qwen2.5-7b")
API, ENGINE = FRONTENDS["api_server"], FRONTENDS["engine"]


def decodes(n: int, context: int = 500) -> BatchShape:
    return BatchShape.decodes(n, n * context)


def test_cpu_terms_per_step_and_per_sequence():
    """The engine core's CPU time: the catalog's step and per-scheduled-sequence overhead plus
    the front-end's share per step and per emitting sequence; the API server's stage: per
    step plus per emitting sequence (output processing + one SSE event per token)."""
    e = G.efficiency
    r = build_roofline(G, M, frontend=API)
    bare = build_roofline(G, M)
    for shape in (decodes(1), decodes(64), decodes(256)):
        parts, alone = r.breakdown(shape), bare.breakdown(shape)
        n = shape.num_seqs
        assert parts["cpu"] == pytest.approx(e.step_overhead + API.core_step_s + (e.seq_overhead + API.core_seq_s) * n)
        assert parts["frontend"] == pytest.approx(API.stage_step_s + (API.output_seq_s + API.stream_seq_s) * n)
        assert alone["cpu"] == pytest.approx(e.step_overhead + e.seq_overhead * n) and alone["frontend"] == 0
        assert parts["gpu"] == alone["gpu"]  # the front-end never touches GPU time
    # a prefill chunk that emits no token costs the front-end its per-step part only
    chunk = BatchShape()
    chunk.add_chunk(0, 512, emits=False)
    assert r.breakdown(chunk)["frontend"] == pytest.approx(API.stage_step_s)
    eng = build_roofline(G, M, frontend=ENGINE).breakdown(decodes(10))
    assert eng["frontend"] == 0 and eng["cpu"] == pytest.approx(
        e.step_overhead + ENGINE.core_step_s + (e.seq_overhead + ENGINE.core_seq_s) * 10
    )


def test_overlap_rule():
    """Async scheduling: the step is the longest of GPU time, engine-core CPU time and the
    front-end stage; without it GPU and engine-core CPU add up, and the stage (another
    process) still only bounds the step from below."""
    slow_core = replace(API, core_step_s=0.040)  # engine core slower than the GPU
    slow_stage = replace(API, stage_step_s=0.060)  # API server slower than both
    for fe in (API, slow_core, slow_stage):
        overlap = build_roofline(G, M, frontend=fe)
        serial = build_roofline(G, M, frontend=fe, engine=Engine(async_scheduling=False))
        for shape in (decodes(1), decodes(100), decodes(256, 2000)):
            p = overlap.breakdown(shape)
            assert overlap.step_time(shape) == pytest.approx(max(p["gpu"], p["cpu"], p["frontend"]))
            assert serial.step_time(shape) == pytest.approx(max(p["gpu"] + p["cpu"], p["frontend"]))
    # which term sets the step, for one batch of 100 decodes
    shape = decodes(100)
    gpu = build_roofline(G, M).breakdown(shape)["gpu"]
    assert build_roofline(G, M, frontend=API).step_time(shape) == pytest.approx(gpu)  # both hidden
    assert build_roofline(G, M, frontend=slow_core).step_time(shape) > 0.040 > gpu
    assert build_roofline(G, M, frontend=slow_stage).step_time(shape) == pytest.approx(0.060 + API.stage_seq_s * 100)


def test_stream_interval_and_api_server_count_divide_the_streaming_work():
    spec = Serving(stream_interval=10, api_server_count=2).spec
    assert spec.stage_seq_s == pytest.approx((API.output_seq_s + API.stream_seq_s / 10) / 2)
    assert spec.stage_step_s == API.stage_step_s and spec.core_seq_s == API.core_seq_s


def fast_gpu_scenario(frontend: str, extra: tuple[str, ...] = ()) -> des.Scenario:
    """256 closed-loop users of a 7B model on an H100: the decode step's GPU time (~8 ms)
    is shorter than the API server's ~21 ms of streaming for 256 tokens a step."""
    return des.load_scenario(
        {
            "seed": 3,
            "gpu": "h100-80gb",
            "model": "qwen2.5-7b",
            "horizon": {"num_requests": 768},
            "workload": {
                "arrival": {"process": "closed", "concurrency": 256},
                "prompt_tokens": {"dist": "fixed", "value": 64},
                "output_tokens": {"dist": "fixed", "value": 100},
            },
            # stated: vLLM's defaults differ by front-end (the LLM class's token budget is twice vllm serve's)
            "scheduler": {"kind": "continuous", "max_num_seqs": 256, "max_num_batched_tokens": 2048},
            "serving": {"frontend": frontend},
        },
        list(extra),
    )


def test_front_end_switch_changes_tpot_where_the_api_server_sets_the_pace():
    api = des.simulate(fast_gpu_scenario("api_server"))
    eng = des.simulate(fast_gpu_scenario("engine"))
    batched = des.simulate(fast_gpu_scenario("api_server", ("serving.stream_interval=16",)))
    # full decode steps of 256: the API server's stage sets them, the engine's GPU time the other
    full = 256
    stage = API.stage_step_s + API.stage_seq_s * full
    steps = api.steps[(api.steps["decode_tokens"] == full) & (api.steps["prefill_tokens"] == 0)]
    assert len(steps) > 50 and np.allclose(steps["duration"], stage)
    eng_steps = eng.steps[(eng.steps["decode_tokens"] == full) & (eng.steps["prefill_tokens"] == 0)]
    assert len(eng_steps) > 50 and (eng_steps["duration"] < 0.8 * stage).all()
    # and so TPOT: behind the API server tokens come at its pace, slower than the GPU's
    assert api.summary["tpot_mean"] > 1.2 * eng.summary["tpot_mean"]
    # (a request decodes mostly in full steps; the few that also carry a new prompt are longer)
    assert stage <= api.summary["tpot_p50"] < 1.2 * stage
    # streaming every 16th token lowers the stage below the GPU's step: the GPU's pace again
    # (the full steps are the GPU's; the two front-ends' ways in differ, and so do the few
    # steps that carry a prompt)
    b_steps = batched.steps[(batched.steps["decode_tokens"] == full) & (batched.steps["prefill_tokens"] == 0)]
    assert len(b_steps) > 50 and (b_steps["duration"] < 0.8 * stage).all()
    assert batched.summary["tpot_mean"] == pytest.approx(eng.summary["tpot_mean"], rel=0.03)
    assert batched.summary["tpot_mean"] < api.summary["tpot_mean"] / 1.2


def closed_four(seed: int = 0, frontend: str | None = None) -> des.Scenario:
    data = {
        "seed": seed,
        "horizon": {"num_requests": 200},
        "workload": {
            "arrival": {"process": "closed", "concurrency": 4, "think_time": 0},
            "prompt_tokens": {"dist": "fixed", "value": 256},
            "output_tokens": {"dist": "fixed", "value": 32},
        },
    }
    if frontend is not None:
        data["serving"] = {"frontend": frontend}
    return des.load_scenario(data)


def test_four_closed_loop_users_no_longer_share_one_ttft():
    ttft = des.simulate(closed_four()).requests["ttft"].round(6)  # to the microsecond: no rounding noise
    assert ttft.nunique() > len(ttft) // 2  # jittered issue times, not lock-step
    # an abstract server (constant step time, no serving stack) keeps the textbook lock-step
    lock = des.load_scenario(
        closed_four().resolved() | {"cost_model": {"kind": "constant", "step_time": 0.02}, "serving": None}
    )
    assert des.simulate(lock).requests["ttft"].round(6).nunique() == 1


def test_same_seed_same_results_and_the_client_stream_shifts_no_other():
    a, b = des.simulate(closed_four(7)), des.simulate(closed_four(7))
    assert a.requests.equals(b.requests) and a.steps.equals(b.steps)
    assert not a.requests.equals(des.simulate(closed_four(8)).requests)
    # the engine front-end's turnaround differs, the requests' lengths drawn do not
    scn = {
        "seed": 5,
        "horizon": {"num_requests": 300},
        "workload": {
            "arrival": {"process": "closed", "concurrency": 8},
            "prompt_tokens": {"dist": "lognormal", "mean": 300, "sigma": 0.5},
            "output_tokens": {"dist": "geometric", "mean": 40},
        },
    }
    api = des.simulate(des.load_scenario(scn)).requests
    eng = des.simulate(des.load_scenario({**scn, "serving": {"frontend": "engine"}})).requests
    for col in ("prompt_tokens", "output_tokens"):
        assert api[col].equals(eng[col])
    assert not api["arrival_time"].equals(eng["arrival_time"])


@pytest.mark.parametrize("spec", [CLIENTS["api_server"], CLIENTS["engine"]], ids=["api_server", "engine"])
def test_turnaround_draws_are_lognormal_with_the_stated_median_and_sigma(spec):
    draw = spec.sampler(np.random.default_rng(11))
    x = np.array([draw() for _ in range(40_000)])
    mu, s = spec.turnaround_mu, spec.turnaround_sigma
    mean = math.exp(mu + s * s / 2)
    var = (math.exp(s * s) - 1) * math.exp(2 * mu + s * s)
    assert abs(x.mean() - mean) < 4 * math.sqrt(var / len(x))
    logs = np.log(x)  # the log's sample variance has SE sqrt(2 / (n - 1)) s²
    assert abs(logs.var(ddof=1) - s * s) < 4 * math.sqrt(2 / (len(x) - 1)) * s * s
    assert abs(np.median(x) / spec.turnaround_median - 1) < 0.02


def test_front_ends_carry_their_uncertainty():
    for spec in FRONTENDS.values():
        assert 0 < spec.uncertainty <= 2 and spec.source
    default = des.load_scenario(None).frontend
    assert default is not None and default.uncertainty == API.uncertainty


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("serving.frontend=vllm", "error: serving.frontend: must be 'api_server' or 'engine' (got 'vllm')"),
        ("serving.frontends=engine", "error: serving.frontends: unknown key (did you mean 'frontend'?)"),
        ("serving.stream_interval=0", "error: serving.stream_interval: must be > 0 (got 0)"),
        ("serving.endpoint=chatty", "error: serving.endpoint: must be 'chat' or 'completions' (got 'chatty')"),
    ],
)
def test_a_bad_serving_key_is_one_error_line_and_exit_2(tmp_path, override, message):
    out = des_cli("run", "--set", override, "--set", "horizon.duration=1", "--out", str(tmp_path))
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), out.stderr


def test_serving_needs_a_cost_model_with_a_serving_stack(tmp_path):
    out = des_cli(
        "run", "--set", "cost_model={kind: constant, step_time: 0.01}", "--set", "serving.frontend=engine",
        "--set", "horizon.duration=1", "--out", str(tmp_path),
    )  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "error: serving.frontend: a constant cost model states whole step times, with no serving stack around "
        "them (the front-end's CPU time is the roofline's: cost_model.kind: roofline)"
    ]
    # a resolved roofline scenario's default section is dropped when a study switches the cost model
    data = des.load_scenario(None).resolved() | {"cost_model": {"kind": "constant", "step_time": 0.01}}
    assert data["serving"] == {
        "frontend": "api_server",
        "endpoint": None,
        "stream_interval": 1,
        "api_server_count": 1,
        "uncertainty": None,
    }
    assert des.load_scenario(data).serving is None
    with pytest.raises(des.ScenarioError, match="serving.stream_interval: only an api_server"):
        des.load_scenario(None, ["serving={frontend: engine, stream_interval: 4}"])
