"""Speculative decoding on whole runs (``scheduler.speculative``, des.engine.schedulers.speculating).

- ``k = 0`` is no speculation, byte for byte (hashes of the request and step tables);
- ``α = 1`` yields exactly ``k + 1`` tokens per decoding sequence per step: a request of
  ``1 + m (k + 1)`` output tokens alone on the GPU decodes in exactly ``m`` steps;
- over a whole run, the mean tokens kept per decoding sequence-step lies within 3 standard
  errors (``sqrt(Var[T] / S)``, ``Var[T]`` exact, ``S`` sequence-steps) of
  ``(1 − α^(k+1)) / (1 − α)``, plus the bias the end of each request can cause (a draw
  cut to what a request has left loses at most ``k`` tokens, once per request:
  ``N k / S``);
- every request is accounted for, every KV block is back when the run drains (rejected
  drafts' slots included, under preemptions and prefix caching), the fast-forward engine
  matches the per-step one, and the same seed gives the same results;
- the verification step costs what a plain step costs when nothing is proposed, and
  more rows and the proposer's passes when something is;
- bad settings give one line naming the field and exit status 2 through the CLI.
"""

from __future__ import annotations

import copy
import hashlib
import math
from dataclasses import replace

import pandas as pd
import pytest

import des
from des import catalog
from des.cost.base import BatchShape, CostContext
from des.cost.roofline import RooflineConfig
from des.cost.speculative import Verification, build_verification
from des.engine.speculative import expected_tokens, tokens_second_moment
from des.simulation import build, run_until, stop_event
from tests.helpers import des_cli

BASE: dict = {
    "name": "spec",
    "seed": 3,
    "horizon": {"num_requests": 60},
    "workload": {
        "arrival": {"process": "poisson", "rate": 4.0},
        "prompt_tokens": {"dist": "lognormal", "mean": 300, "sigma": 0.5},
        "output_tokens": {"dist": "geometric", "mean": 120},
    },
}


def scenario(spec: dict | None = None, **changes) -> des.Scenario:
    data = copy.deepcopy(BASE)
    for key, value in changes.items():
        data[key] = value
    if spec is not None:
        data.setdefault("scheduler", {})["speculative"] = spec
    return des.load_scenario(data)


def digest(result: des.Result) -> str:
    """A hash of the request and step tables, every value and column name."""
    h = hashlib.sha256()
    for table in (result.requests, result.steps):
        h.update(",".join(table.columns).encode())
        h.update(pd.util.hash_pandas_object(table, index=True).to_numpy().tobytes())
    return h.hexdigest()


def ngram(k: int, alpha: float) -> dict:
    return {"method": "ngram", "num_speculative_tokens": k, "acceptance_rate": alpha}


# -- k = 0 and alpha = 1: exact ---------------------------------------------------------
@pytest.mark.parametrize(
    "spec",
    [ngram(0, 0.7), {"method": "draft", "model": "qwen2.5-0.5b", "num_speculative_tokens": 0, "acceptance_rate": 0.5}],
)
def test_k_zero_is_no_speculation_byte_for_byte(spec):
    plain = des.simulate(scenario())
    zero = des.simulate(scenario(spec))
    assert digest(zero) == digest(plain)
    assert zero.summary == plain.summary


def test_alpha_one_yields_k_plus_one_tokens_per_step():
    k, m = 3, 12
    out = 1 + m * (k + 1)
    n = 8
    scn = scenario(
        ngram(k, 1.0),
        horizon={"num_requests": n},
        workload={
            "arrival": {"process": "poisson", "rate": 0.05},  # ~20 s apart: each request alone
            "prompt_tokens": {"dist": "fixed", "value": 64},
            "output_tokens": {"dist": "fixed", "value": out},
        },
    )
    res = des.simulate(scn)
    steps, reqs = res.steps, res.requests
    assert (reqs["status"] == "completed").all()
    decode = steps[steps["prefill_tokens"] == 0]
    assert (decode["batch_size"] == 1).all()  # alone on the GPU throughout
    assert len(decode) == n * m  # m verification steps per request, exactly
    assert (decode["decode_tokens"] == k + 1).all()
    assert (decode["tokens_emitted"] == k + 1).all()
    assert steps["tokens_emitted"].sum() == n * out
    # TPOT: m steps spread over the out - 1 tokens after the first
    step = decode["duration"].median()
    assert reqs["tpot"].to_numpy() == pytest.approx(m * step / (out - 1), rel=0.02)


def test_alpha_one_speeds_up_a_lone_request_by_nearly_k_plus_one():
    """Alone on a bandwidth-bound GPU, a verification step of 4 rows costs about what a
    one-row step costs, so TPOT drops by nearly 4 (n-gram: no proposer cost)."""
    lone = {
        "arrival": {"process": "poisson", "rate": 0.05},
        "prompt_tokens": {"dist": "fixed", "value": 64},
        "output_tokens": {"dist": "fixed", "value": 201},
    }
    plain = des.simulate(scenario(horizon={"num_requests": 4}, workload=lone)).requests["tpot"].mean()
    spec = des.simulate(scenario(ngram(3, 1.0), horizon={"num_requests": 4}, workload=lone)).requests["tpot"].mean()
    assert 3.0 < plain / spec < 4.0


# -- the acceptance law on a whole run --------------------------------------------------
@pytest.mark.parametrize(("k", "alpha"), [(3, 0.6), (5, 0.8)])
def test_mean_tokens_per_step_matches_the_formula_on_a_whole_run(k, alpha):
    n, out = 40, 2500
    scn = scenario(
        ngram(k, alpha),
        seed=11,
        horizon={"num_requests": n},
        workload={
            "arrival": {"process": "poisson", "rate": 1000.0},  # all prompts in the first steps
            "prompt_tokens": {"dist": "fixed", "value": 100},
            "output_tokens": {"dist": "fixed", "value": out},
        },
        scheduler={"max_num_batched_tokens": 8192, "speculative": ngram(k, alpha)},
    )
    res = des.simulate(scn)
    assert res.summary["preemptions"] == 0
    steps = res.steps
    decode = steps[steps["prefill_tokens"] == 0]
    tokens = decode["tokens_emitted"].sum()
    seq_steps = decode["batch_size"].sum()
    assert tokens + steps.loc[steps["prefill_tokens"] > 0, "tokens_emitted"].sum() == n * out
    mean = expected_tokens(alpha, k)
    se = math.sqrt((tokens_second_moment(alpha, k) - mean**2) / seq_steps)
    bias = n * k / seq_steps  # the last draw of each request, cut to what it had left
    got = tokens / seq_steps
    assert mean - 3 * se - bias < got < mean + 3 * se


# -- accounting, conservation, determinism ----------------------------------------------
PRESSURE: dict = {
    "name": "spec-pressure",
    "seed": 5,
    "horizon": {"num_requests": 150},
    "workload": {
        "arrival": {"process": "poisson", "rate": 30.0},
        "prompt_tokens": {"dist": "lognormal", "mean": 400, "sigma": 0.6},
        "output_tokens": {"dist": "geometric", "mean": 150},
        "shared_prefix": {"tokens": 256, "groups": 3},
    },
    "scheduler": {
        "max_num_batched_tokens": 512,
        "num_gpu_blocks_override": 900,
        "block_size": 16,
        "speculative": {
            "method": "draft",
            "model": "qwen2.5-0.5b",
            "num_speculative_tokens": 4,
            "acceptance_rate": 0.6,
        },
    },
}


@pytest.mark.parametrize("caching", [True, False])
def test_every_request_accounted_for_and_every_block_returned(caching):
    data = copy.deepcopy(PRESSURE)
    data["scheduler"]["enable_prefix_caching"] = caching
    scn = des.load_scenario(data)
    env, cluster, procs = build(scn)
    run_until(env, stop_event(scn, env, cluster, procs))
    reqs = cluster.ledger.arrays()
    assert len(cluster.ledger) == 150
    assert (reqs["generated"] == reqs["output_tokens"]).all()
    for inst in cluster.instances:
        assert inst.kv.free == inst.kv.num_blocks  # no block kept for a rejected draft
        assert not inst.kv.held
    res = des.simulate(scn)
    assert res.summary["num_completed"] == 150
    assert res.summary["preemptions"] > 0  # the pressure reached the preemption path
    assert res.steps["tokens_emitted"].sum() == res.requests["output_tokens"].sum()


def test_fast_forward_matches_the_per_step_engine():
    scn = des.load_scenario(PRESSURE)
    assert digest(des.simulate(scn)) == digest(des.simulate(scn, fast_forward=False))


def test_same_seed_same_results_other_seed_other_draws():
    a = des.simulate(scenario(ngram(3, 0.7)))
    b = des.simulate(scenario(ngram(3, 0.7)))
    c = des.simulate(scenario(ngram(3, 0.7), seed=4))
    assert digest(a) == digest(b)
    assert digest(a) != digest(c)
    # the speculative stream is the last one: the workload's draws are the same
    assert (a.requests["output_tokens"].to_numpy() == des.simulate(scenario()).requests["output_tokens"]).all()


# -- cost ------------------------------------------------------------------------------
def _ctx(**kw) -> CostContext:
    from des import catalog

    return CostContext(catalog.gpu("rtx4090"), catalog.model("qwen2.5-7b"), **kw)


SHAPES = [
    BatchShape.decodes(1, 500),
    BatchShape.decodes(37, 37 * 900),
    BatchShape.decodes(200, 200 * 3000),
]


def _mixed() -> BatchShape:
    s = BatchShape.decodes(20, 20 * 700)
    s.add_chunk(0, 480, True)
    s.add_chunk(1000, 300, False)
    return s


@pytest.mark.parametrize("shape", [*SHAPES, _mixed()])
def test_verification_of_nothing_costs_a_plain_step(shape):
    from des.catalog.precision import Precision

    kind = RooflineConfig()
    ctx = _ctx(precision=Precision())
    plain = kind.build(ctx)
    assert Verification(plain, None, 0).step_time(shape) == plain.step_time(shape)


def test_verification_costs_more_rows_and_the_proposer_passes():
    from des import catalog
    from des.catalog.precision import Precision

    kind, p = RooflineConfig(), Precision()
    ctx = _ctx(precision=p)
    plain = kind.build(ctx)
    k = 3
    ngram_cost = build_verification(kind, ctx, k, None)
    draft_ctx = CostContext(catalog.gpu("rtx4090"), catalog.model("qwen2.5-0.5b"), p)
    draft_cost = build_verification(kind, ctx, k, draft_ctx)
    for n, ctx_tokens in [(1, 500), (16, 16 * 1000), (128, 128 * 1000)]:
        base = BatchShape.decodes(n, ctx_tokens)
        spec = BatchShape(n, 0, 0.0, 0, n * (k + 1), ctx_tokens + n * (k + 1), n, n * k)
        t_plain, t_ngram, t_draft = plain.step_time(base), ngram_cost.step_time(spec), draft_cost.step_time(spec)
        assert t_plain < t_ngram < t_draft
        # at batch 1 the step is weight-bound: 4 rows cost little more than 1
        if n == 1:
            assert t_ngram < 1.1 * t_plain
    # a draft's k passes: the first over the step's rows, k - 1 of one token per sequence
    spec = BatchShape(16, 0, 0.0, 0, 64, 16 * 1000 + 64, 16, 48)
    gap = draft_cost.step_time(spec) - ngram_cost.step_time(spec)
    assert gap == pytest.approx(draft_cost.draft_time(spec))
    assert draft_cost.draft is not None
    assert gap > k * draft_cost.draft.step_time(BatchShape.decodes(16, 16 * 1000)) * 0.99


def test_a_draft_model_takes_kv_capacity_and_eagle_takes_less():
    plain = scenario().memory_plan()
    k_alpha = {"num_speculative_tokens": 3, "acceptance_rate": 0.5}
    draft = scenario({"method": "draft", "model": "qwen2.5-0.5b", **k_alpha})
    eagle = scenario({"method": "eagle", "model": "yuhuili/EAGLE-Qwen2-7B", **k_alpha})
    d, e = draft.memory_plan(), eagle.memory_plan()
    assert d.kv_capacity_tokens < e.kv_capacity_tokens < plain.kv_capacity_tokens
    assert plain.weights < e.weights < d.weights
    # the draft's own KV per token: 2 x 24 layers x 2 heads x 64 x 2 bytes
    assert d.kv_bytes_per_token == plain.kv_bytes_per_token + 12_288


def test_mtp_runs_the_models_own_layers():
    mtp = {"method": "mtp", "num_speculative_tokens": 1, "acceptance_rate": 0.8}
    base = scenario()
    model = base.model.model_dump() | {"num_nextn_predict_layers": 1, "name": "qwen2.5-7b-mtp"}
    scn = scenario(mtp, model=model)
    plan = scn.memory_plan()
    assert plan.kv_bytes_per_token == base.memory_plan().kv_bytes_per_token * 29 // 28
    res = des.simulate(scn)
    assert res.summary["num_completed"] == 60


# -- bad input through the CLI ----------------------------------------------------------
@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("{method: ngram, num_speculative_tokens: -1, acceptance_rate: 0.5}",
         "scheduler.speculative.num_speculative_tokens: must be >= 0"),
        ("{method: ngram, num_speculative_tokens: 2, acceptance_rate: 1.5}",
         "scheduler.speculative.acceptance_rate: must be <= 1"),
        ("{method: draft, num_speculative_tokens: 2, acceptance_rate: 0.5}",
         "scheduler.speculative.model: method draft needs a model"),
        ("{method: draft, model: qwen2.5-05b, num_speculative_tokens: 2, acceptance_rate: 0.5}",
         "scheduler.speculative.model: unknown model 'qwen2.5-05b' (did you mean 'qwen2.5-0.5b'?)"),
        ("{method: mtp, num_speculative_tokens: 2, acceptance_rate: 0.5}",
         "scheduler.speculative.method: mtp needs the model's multi-token-prediction layers"),
    ],
)  # fmt: skip
def test_bad_settings_give_one_line_and_exit_2(tmp_path, override, words):
    path = tmp_path / "s.yaml"
    path.write_text(
        "horizon: {num_requests: 5}\nworkload:\n  arrival: {process: poisson, rate: 1}\n"
        "  prompt_tokens: {dist: fixed, value: 10}\n  output_tokens: {dist: fixed, value: 10}\n"
    )
    r = des_cli("run", str(path), "--set", f"scheduler.speculative={override}", "--out", str(tmp_path / "o"))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert words in lines[0]
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize(("kind", "words"), [("static", "static batching does not speculate"),
                                             ("disaggregated", "not modelled for disaggregated serving")])  # fmt: skip
def test_speculation_refused_where_not_modelled(tmp_path, kind, words):
    path = tmp_path / "s.yaml"
    path.write_text(
        "horizon: {num_requests: 5}\nworkload:\n  arrival: {process: poisson, rate: 1}\n"
        "  prompt_tokens: {dist: fixed, value: 10}\n  output_tokens: {dist: fixed, value: 10}\n"
        f"scheduler:\n  kind: {kind}\n"
        "  speculative: {method: ngram, num_speculative_tokens: 2, acceptance_rate: 0.5}\n"
    )
    r = des_cli("run", str(path), "--out", str(tmp_path / "o"))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert lines == [f"error: scheduler.speculative: {words}" + lines[0].split(words, 1)[1]]


def test_the_summary_says_what_speculates():
    from des.render.run import hardware_line

    line = hardware_line(scenario(ngram(3, 0.7)))
    assert "speculative decoding (ngram, k 3, acceptance 0.7: 2.53 tokens a step)" in line
    assert "speculative" not in hardware_line(scenario(ngram(0, 0.7)))


@pytest.mark.parametrize("pool", ["prefill", "decode"])
def test_a_disaggregated_pool_refuses_speculation_by_its_path(pool):
    spec = ngram(2, 0.5)
    with pytest.raises(des.ScenarioError) as err:
        scenario(scheduler={"kind": "disaggregated", pool: {"speculative": spec}})
    assert [p for p, _ in err.value.problems] == [f"scheduler.{pool}.speculative"]


def test_blocks_in_use_are_those_of_the_tokens_kept_after_every_step(monkeypatch):
    """After every step, rejected drafts' and lookahead slots given back: the blocks in use
    are exactly those of the running sequences' computed tokens plus those held by requests
    that left (no prefix caching, so no block is shared)."""
    from des.engine.schedulers.speculating import SpeculativeScheduler

    data = copy.deepcopy(PRESSURE)
    data["scheduler"]["enable_prefix_caching"] = False
    data["workload"].pop("shared_prefix")
    original = SpeculativeScheduler.finish_step
    checked = []

    def checking(self, step, now):
        released = original(self, step, now)
        running = sum(self.kv.blocks_for(seq.req.computed) for seq in self.running)
        assert self.kv.used == running + sum(self.kv.held.values())
        checked.append(step.emitted)
        return released

    monkeypatch.setattr(SpeculativeScheduler, "finish_step", checking)
    res = des.simulate(des.load_scenario(data))
    assert len(checked) == len(res.steps) > 100
    assert res.summary["preemptions"] > 0


def test_an_eagle_head_costs_less_than_a_draft_model_at_the_same_acceptance():
    k_alpha = {"num_speculative_tokens": 3, "acceptance_rate": 0.7}
    eagle = des.simulate(scenario({"method": "eagle", "model": "yuhuili/EAGLE-Qwen2-7B", **k_alpha}))
    draft = des.simulate(scenario({"method": "draft", "model": "qwen2.5-0.5b", **k_alpha}))
    plain = des.simulate(scenario())
    assert eagle.summary["num_completed"] == draft.summary["num_completed"] == 60
    assert eagle.summary["tpot_mean"] < draft.summary["tpot_mean"] < plain.summary["tpot_mean"]


@pytest.mark.parametrize("model", ["qwen2.5-7b", "gpt-oss-20b"])
def test_every_verification_step_counts_its_proposed_rows_and_windows(monkeypatch, model):
    """The shape a speculating step is costed on: ``spec_tokens`` = rows − sequences that
    decode (each verifies ``q − 1`` proposed tokens), no window on a model without windowed
    layers, and on one with them each member's windowed read capped at the window (the
    merge of speculation and windowed attention once passed the proposed rows as the window)."""
    from des.engine.schedulers.speculating import SpeculativeScheduler

    original = SpeculativeScheduler._shape
    seen: list[tuple[BatchShape, int, int]] = []

    def recording(self, batch):
        shape = original(self, batch)
        members = [seq for seq in self.spec.members if seq.q]
        rows = sum(seq.q for seq in members)
        window = self.kv.window
        reads = sum(min(seq.req.computed + seq.q, window) for seq in members) if window else 0
        seen.append((shape, rows - len(members), reads))
        return shape

    monkeypatch.setattr(SpeculativeScheduler, "_shape", recording)
    des.simulate(scenario(ngram(3, 0.7), model=model))
    window = des.catalog.model(model).window or 0
    decoding = [(s, extra, reads) for s, extra, reads in seen if s.decode_tokens]
    assert len(decoding) > 100
    assert all(s.spec_tokens == extra and s.window == window for s, extra, _ in decoding)
    assert any(s.spec_tokens > 0 for s, _, _ in decoding)
    if window:
        assert all(s.decode_window_context == reads <= s.decode_context for s, _, reads in decoding)


def test_verification_of_a_windowed_model_reads_only_the_window():
    # gpt-oss: half the layers attend within 128 tokens; 32 sequences of 8,000 tokens verifying
    # 3 drafts each read far less KV on those layers than the same step costed without windows
    gpt = catalog.model("gpt-oss-20b")
    ctx = CostContext(catalog.gpu("h100-80gb"), gpt, des.load_scenario(None, ["model=gpt-oss-20b"]).precision)
    v = build_verification(RooflineConfig(), ctx, 3, None)
    n, q, context = 32, 4, 8000
    full = BatchShape(n, 0, 0.0, 0, n * q, n * (context + q), n, spec_tokens=n * (q - 1))
    assert gpt.window is not None
    windowed = replace(full, window=gpt.window, decode_window_context=n * gpt.window)
    assert v.step_time(windowed) < v.step_time(full)
    assert v.step_time(windowed) == v.target.step_time(windowed)  # n-gram: no proposer passes
