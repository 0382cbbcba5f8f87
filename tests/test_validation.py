"""The README's validation table: current, complete, sourced, predicted the way ``des run``
predicts, and never an input to a fit.

When the cost model changes, the first test fails until the table is regenerated with
``python -m des.tools.validation --write``. No test here bounds the errors: the table
reports how far des is from each measurement, whatever that is.
"""

from __future__ import annotations

import re

import pytest

from des.cost.base import BatchShape, CostContext
from des.cost.roofline import Roofline
from des.tools import validation as v
from tests.helpers import ROOT

REGENERATE = "python -m des.tools.validation --write"


@pytest.fixture(scope="module")
def rows() -> list[v.Row]:
    return v.rows()


def readme_block() -> str:
    text = (ROOT / "README.md").read_text()
    start, stop = text.find(v.BEGIN), text.find(v.END)
    assert 0 <= start < stop, f"README.md has lost its validation table's markers; restore them and run `{REGENERATE}`"
    return text[start : stop + len(v.END)]


def test_the_readme_table_is_current(rows):
    assert readme_block() == v.block(rows), f"README.md's validation table is stale: run `{REGENERATE}`"


def test_every_measurement_has_a_row_with_its_source(rows):
    measurements = v.load()
    lines = v.table(rows).splitlines()[2:]
    assert len(measurements) == len(rows) == len(lines) > 0
    assert sorted(map(repr, measurements)) == sorted(repr(r.measurement) for r in rows)  # each once
    assert [r.gpu for r in rows] == sorted(r.gpu for r in rows)  # GPU by GPU
    for r, line in zip(rows, lines, strict=True):
        m = r.measurement
        assert m.source.strip() and m.where.strip() and m.engine.strip()
        assert re.fullmatch(r"https://\S+", m.url)
        assert f"[{m.source}]({m.url}): {m.where}" in line  # the table cites it
        assert f"| {m.value:g} " in line
    # no measurement twice
    keys = [(r.gpu, r.model, r.measurement.precision, r.measurement.tp, r.measurement.engine, r.measurement.batch,
             r.measurement.prompt_tokens, r.measurement.output_tokens, r.measurement.metric) for r in rows]  # fmt: skip
    assert len(set(map(repr, keys))) == len(keys)


def test_the_summary_is_the_median_absolute_error_of_each_gpu(rows):
    line = v.summary(rows)
    for gpu in {r.gpu for r in rows}:
        errors = sorted(abs(r.error) for r in rows if r.gpu == gpu)
        n = len(errors)
        median = (errors[n // 2] + errors[(n - 1) // 2]) / 2
        assert f"{gpu} {100 * median:.0f} % ({n})" in line


def test_each_row_says_where_its_gpus_factors_come_from(rows):
    for r in rows:
        sc = v.one_request_scenario(r.measurement)
        assert r.provenance == sc.gpu.efficiency.provenance in ("fitted", "transferred", "spec")
        assert (r.gpu, r.model) == (sc.gpu.name, sc.model.name)


def test_no_fit_reads_the_measurements():
    """Only the validation module and the calibration report (which shows the same checks)
    name the file or the module; the fitting code (des/tools/calibrate.py, des/catalog, and
    anything else under des/) never does."""
    needles = ("single-stream.yaml", "data/validation", "tools.validation", "tools import validation")
    readers = set()
    for folder in ("des", "analysis"):
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text()
            if any(n in text for n in needles):
                readers.add(path.relative_to(ROOT).as_posix())
    assert readers <= {"des/tools/validation.py", "analysis/calibration.py"}
    calibration = (ROOT / "analysis" / "calibration.py").read_text()
    fit = calibration[calibration.index("def main(") :]
    assert "validation" not in fit.split("check(fit)")[0]  # the fit and its drift check come first, without it


def test_a_prediction_is_a_des_run_of_the_one_request():
    """The request's prefill step, then one decode step per further token whose KV holds the
    prompt and the tokens so far: the steps ``des run`` takes, costed by the scenario's model."""
    m = v.Measurement(
        gpu="rtx4090", model="qwen2.5-7b", engine="e", frontend="api_server", prompt_tokens=100, output_tokens=50,
        metric="output_rate", value=1.0, source="s", url="https://example.org", where="w",
    )  # fmt: skip
    sc = v.one_request_scenario(m)
    assert sc.horizon.num_requests == 1 and sc.layout.pools[0].tp == 1
    cost = sc.cost_model.build(CostContext(sc.gpu, sc.model, sc.precision, sc.layout.pools[0].tp, sc.frontend))
    assert isinstance(cost, Roofline)
    # behind a serving front-end the request reaches the scheduler its ingress time late, and
    # its tokens reach the client the front-end's egress after their steps
    fe = sc.frontend
    assert fe is not None
    ingress, egress = fe.ingress(100), fe.egress
    prefill = BatchShape()
    prefill.add_chunk(0, 100, True)
    steps = [prefill]
    for i in range(1, 50):
        decode = BatchShape()
        decode.add_decode(100 + i - 1)
        steps.append(decode)
    # the prefill is formed on an idle engine: its CPU time adds to its GPU time
    first = cost.serial().step_time(prefill)
    assert first > cost.step_time(prefill)
    e2e = ingress + first + sum(cost.step_time(s) for s in steps[1:]) + egress
    assert v.predict(m) == pytest.approx(50 / e2e, rel=1e-12)
    assert v.predict(m.model_copy(update={"metric": "total_rate"})) == pytest.approx(150 / e2e, rel=1e-12)
    decode_time = sum(cost.step_time(s) for s in steps[1:]) / 49
    assert v.predict(m.model_copy(update={"metric": "decode_rate"})) == pytest.approx(1 / decode_time, rel=1e-12)
    assert v.predict(m.model_copy(update={"metric": "tpot"})) == pytest.approx(1e3 * decode_time, rel=1e-12)
    assert v.predict(m.model_copy(update={"metric": "e2e"})) == pytest.approx(1e3 * e2e, rel=1e-12)
    one = m.model_copy(update={"metric": "ttft", "output_tokens": 1})
    assert v.predict(one) == pytest.approx(1e3 * (ingress + first + egress), rel=1e-12)


def test_a_batch_is_submitted_at_once_and_timed_to_its_last_token():
    """``batch`` equal requests arrive together: one ``LLM.generate`` call adds them one after
    another, then one prefill step of all their prompts (formed on an idle engine), then
    one decode step of all of them per further token (a static batch, as benchmark_latency runs)."""
    m = v.Measurement(
        gpu="rtx4090", model="qwen2.5-7b", engine="e", frontend="engine", batch=4, prompt_tokens=32,
        output_tokens=20, metric="e2e", value=1.0, source="s", url="https://example.org", where="w",
    )  # fmt: skip
    sc = v.one_request_scenario(m)
    cost = sc.cost_model.build(CostContext(sc.gpu, sc.model, sc.precision, sc.layout.pools[0].tp, sc.frontend))
    assert isinstance(cost, Roofline)
    prefill = BatchShape()
    for _ in range(4):
        prefill.add_chunk(0, 32, True)
    fe = sc.frontend
    assert fe is not None and fe.caller_steps and fe.egress == 0
    added = 3 * fe.ingress_busy(32) + fe.ingress(32)  # the last added after the three before it
    total = added + cost.serial().step_time(prefill)
    for i in range(1, 20):
        total += cost.step_time(BatchShape.decodes(4, 4 * (32 + i - 1)))
    assert v.predict(m) == pytest.approx(1e3 * total, rel=1e-12)
    with pytest.raises(ValueError, match="wall time, e2e"):
        m.model_validate(m.model_dump() | {"metric": "output_rate"})


def test_a_measurement_carries_the_engine_settings_it_names():
    eager = next(m for m in v.load() if "cost_model.enforce_eager" in m.set)
    assert eager.set == {"cost_model.enforce_eager": True, "scheduler.gpu_memory_utilization": 1.0}
    sc = v.one_request_scenario(eager)
    assert sc.cost_model.model_dump()["enforce_eager"] is True and sc.scheduler.gpu_memory_utilization == 1.0
    plain = v.one_request_scenario(eager.model_copy(update={"set": {}}))
    assert (
        plain.cost_model.model_dump()["enforce_eager"] is False
        and plain.layout.pools[0].policy.gpu_memory_utilization < 1
    )


def test_write_replaces_only_the_table(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nbefore\n\n{v.BEGIN}\nold\n{v.END}\n\nafter\n")
    data = tmp_path / "m.yaml"
    data.write_text(
        "measurements:\n"
        "  - {gpu: rtx4090, model: qwen2.5-7b, engine: e, frontend: engine, prompt_tokens: 10, output_tokens: 20,\n"
        "     metric: output_rate, value: 50, source: s, url: 'https://example.org', where: w}\n"
    )
    assert v.main(["--write", "--data", str(data), "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert text.startswith("# x\n\nbefore\n\n") and text.endswith("\n\nafter\n") and "old" not in text
    assert v.block(v.rows(v.load(data))) in text
    readme.write_text("no markers\n")
    with pytest.raises(ValueError, match="no validation table"):
        v.main(["--write", "--data", str(data), "--readme", str(readme)])


def test_a_bad_measurement_is_refused(tmp_path):
    data = tmp_path / "m.yaml"
    data.write_text(
        "measurements:\n"
        "  - {gpu: rtx4090, model: qwen2.5-7b, engine: e, frontend: engine, prompt_tokens: 10, output_tokens: 20,\n"
        "     metric: output_rate, value: 50, source: '', url: 'https://example.org', where: w}\n"
    )
    with pytest.raises(ValueError, match="source"):
        v.load(data)
