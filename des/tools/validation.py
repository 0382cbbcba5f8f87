"""des against public single-stream measurements: the README's validation table.

Each measurement in ``data/validation/single-stream.yaml`` is one request served alone on
a GPU (or a static batch of equal requests submitted at once): its time per output token or
decode rate, its time to first token, or the rate or time of the whole request, as a public
source published it (the file says where, table and row). des predicts it the way
``des run`` would: :func:`one_request_scenario` is a scenario of exactly that request
(the GPU, model, precision and tensor-parallel degree of the measurement, every other
setting at des's defaults but the few engine settings the source states, ``set``), and
:func:`predict` simulates it with :func:`des.simulate` and reads the request's times back.
So a prediction is the same chain of steps a user's run takes: the scheduler's prefill
(chunked at ``max_num_batched_tokens``), then one decode step per further token, each
lasting what the cost model says, CPU time and all.

The error of a row is ``des / measured - 1`` of the quantity as published: above 0 a rate
is predicted too fast, a time too slow. Nothing here is an input: no fit reads the file
(``tests/test_validation.py`` checks it), and the table is regenerated, never tuned to.
Whole-run serving results (many requests at once) are left out on purpose.

    python -m des.tools.validation            # print the table
    python -m des.tools.validation --write    # write it into README.md
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from des.catalog.precision import Precision
from des.config import Strict, load_yaml

if TYPE_CHECKING:
    from des.scenario import Scenario

ROOT = Path(__file__).resolve().parents[2]
#: The measurements (a checkout's file: the table is part of the repository, not of the package).
DATA = ROOT / "data" / "validation" / "single-stream.yaml"
README = ROOT / "README.md"
#: The lines that enclose the generated table in the README.
BEGIN = "<!-- validation table: written by `python -m des.tools.validation --write`; do not edit by hand -->"
END = "<!-- end of validation table -->"

Metric = Literal["output_rate", "total_rate", "decode_rate", "ttft", "tpot", "e2e"]

#: How each metric is counted, and its unit, as the table shows them.
METRICS: dict[str, tuple[str, str]] = {
    "output_rate": ("generated tok/s of the request", "tok/s"),
    "total_rate": ("(prompt + generated) tok/s of the request", "tok/s"),
    "decode_rate": ("1 / TPOT", "tok/s"),
    "ttft": ("TTFT", "ms"),
    "tpot": ("time per output token (ITL)", "ms"),
    "e2e": ("time of the whole request", "ms"),
}


class Measurement(Strict):
    """One public single-stream measurement: a request of ``prompt_tokens`` prompt and
    ``output_tokens`` generated tokens alone on ``tp`` GPUs (or ``batch`` such requests
    submitted at once, a static batch whose ``e2e`` is its wall time), and the ``value`` of
    its ``metric`` (tok/s for rates, ms for times: ``ttft``, ``tpot``, ``e2e``) as
    ``source`` published it (``url``, ``where``: the table and row). ``gpu`` and ``model``
    are catalog names or mappings as in a scenario (a ``base`` and overrides, or a whole
    spec with its ``source``); ``set`` holds dotted des settings that match engine settings
    the source states; ``frontend`` how the source reached the engine (des's
    ``serving.frontend``: ``engine`` for offline benchmarks, ``api_server`` through a server)."""

    gpu: str | dict[str, Any]
    model: str | dict[str, Any]
    precision: Precision = Precision()
    tp: PositiveInt = 1
    batch: PositiveInt = 1
    engine: str = Field(min_length=1)
    frontend: Literal["engine", "api_server"]
    prompt_tokens: PositiveInt
    output_tokens: PositiveInt
    metric: Metric
    value: PositiveFloat
    source: str = Field(min_length=1)
    url: str = Field(pattern=r"^https://\S+$")
    where: str = Field(min_length=1)
    set: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _batch_has_one_time(self) -> Measurement:
        if self.batch > 1 and self.metric != "e2e":
            raise ValueError(f"metric: a batch of {self.batch} requests is measured by its wall time, e2e")
        return self


class ValidationFile(Strict):
    """The data file: ``shared`` blocks (merged into entries with YAML's ``<<:``) and the measurements."""

    shared: dict[str, dict[str, Any]] = Field(default_factory=dict)
    measurements: list[Measurement] = Field(min_length=1)


def load(path: Path = DATA) -> list[Measurement]:
    """The measurements of ``path``, validated."""
    return ValidationFile.model_validate(load_yaml(path.read_text())).measurements


def one_request_scenario(m: Measurement) -> Scenario:
    """The scenario of ``m``'s request alone: its GPU, model, precision and ``tp``, one
    request of its prompt and output lengths, ``m.set`` applied; everything else at the
    defaults ``des run`` fills in (:class:`des.scenario.Scenario`). A batch of ``m.batch``
    requests arrives at once: ``m.batch`` users with no think time, one request each."""
    from des.scenario import load_scenario

    arrival: dict[str, Any] = {"process": "poisson", "rate": 1.0}
    if m.batch > 1:
        arrival = {"process": "closed", "concurrency": m.batch, "think_time": 0.0}
    data = {
        "name": "validation",
        "gpu": m.gpu,
        "model": m.model,
        "precision": m.precision.model_dump(),
        "horizon": {"num_requests": m.batch},
        "workload": {
            "arrival": arrival,
            "prompt_tokens": {"dist": "fixed", "value": m.prompt_tokens},
            "output_tokens": {"dist": "fixed", "value": m.output_tokens},
        },
        "cluster": {"tp": m.tp},
        "serving": {"frontend": m.frontend},
    }
    return load_scenario(data, list(m.set.items()))


def predict(m: Measurement) -> float:
    """des's value of ``m.metric`` for ``m``'s request: a run of :func:`one_request_scenario`,
    its request's ``e2e`` (arrival to last token: nothing else queues), ``tpot`` or ``ttft``
    counted as the source counts them: tokens per second, or milliseconds (the ``e2e`` of a
    batch runs from its arrival to its last request's last token)."""
    from des.simulation import simulate

    requests = simulate(one_request_scenario(m)).requests
    done = requests["status"] == "completed"
    if not done.all():
        bad = requests[~done].iloc[0]
        raise ValueError(f"{m.where}: des did not complete the request ({bad['status']}, {bad['reason']})")
    if m.batch > 1:
        return 1e3 * float(requests["finish_time"].max() - requests["arrival_time"].min())
    req = requests.iloc[0]
    if m.metric == "output_rate":
        return m.output_tokens / float(req["e2e"])
    if m.metric == "total_rate":
        return (m.prompt_tokens + m.output_tokens) / float(req["e2e"])
    if m.metric == "decode_rate":
        return 1.0 / float(req["tpot"])
    if m.metric == "tpot":
        return 1e3 * float(req["tpot"])
    if m.metric == "e2e":
        return 1e3 * float(req["e2e"])
    return 1e3 * float(req["ttft"])


@dataclass(frozen=True)
class Row:
    """A measurement, des's prediction of it, the names of its GPU and model, and where the
    GPU's factors come from."""

    measurement: Measurement
    predicted: float
    gpu: str
    model: str
    provenance: str

    @property
    def error(self) -> float:
        """``predicted / measured - 1``."""
        return self.predicted / self.measurement.value - 1


def rows(measurements: Sequence[Measurement] | None = None) -> list[Row]:
    """Each measurement (default: :data:`DATA`'s) with des's prediction, GPU by GPU (by name;
    in the file's order within a GPU)."""
    out = []
    for m in load() if measurements is None else measurements:
        sc = one_request_scenario(m)
        out.append(Row(m, predict(m), sc.gpu.name, sc.model.name, sc.gpu.efficiency.provenance))
    return sorted(out, key=lambda r: r.gpu)


def _precision(p: Precision) -> str:
    return p.weights if p.kv_cache_dtype == "bf16" else f"{p.weights}, {p.kv_cache_dtype} KV"


def _num(x: float) -> str:
    """Three or more significant figures: 1804, 97.3, 9.91, 0.80."""
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def table(rs: Sequence[Row]) -> str:
    """The markdown table: a row per measurement."""
    lines = [
        "| GPU | model | measurement | measured | des | error | factors | source |",
        "|---|---|---|---:|---:|---:|---|---|",
    ]
    for r in rs:
        m = r.measurement
        how, unit = METRICS[m.metric]
        tp = f", TP {m.tp}" if m.tp > 1 else ""
        batch = f"a batch of {m.batch} × " if m.batch > 1 else ""
        what = (
            f"{m.engine}; {_precision(m.precision)}{tp}; {batch}{m.prompt_tokens:,} → {m.output_tokens:,} tokens: {how}"
        )
        lines.append(
            f"| {r.gpu} | {r.model} | {_cell(what)} | {m.value:g} {unit} | {_num(r.predicted)} {unit} | "
            f"{100 * r.error:+.0f} % | {r.provenance} | [{_cell(m.source)}]({m.url}): {_cell(m.where)} |"
        )
    return "\n".join(lines)


def summary(rs: Sequence[Row]) -> str:
    """One line: the median absolute error per GPU (and its number of rows)."""
    by_gpu: dict[str, list[float]] = {}
    for r in rs:
        by_gpu.setdefault(r.gpu, []).append(abs(r.error))
    parts = [f"{gpu} {100 * statistics.median(errors):.0f} % ({len(errors)})" for gpu, errors in sorted(by_gpu.items())]
    return "Median |error| per GPU (rows): " + ", ".join(parts) + "."


def block(rs: Sequence[Row]) -> str:
    """What goes between the README's markers, markers included."""
    return f"{BEGIN}\n\n{table(rs)}\n\n{summary(rs)}\n\n{END}"


def replace_block(text: str, new: str) -> str:
    """``text`` with the part from :data:`BEGIN` to :data:`END` replaced by ``new``."""
    start, stop = text.find(BEGIN), text.find(END)
    if start < 0 or stop < start:
        raise ValueError(f"the README has no validation table between {BEGIN!r} and {END!r}")
    return text[:start] + new + text[stop + len(END) :]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"write the table into {README.name}")
    ap.add_argument("--data", type=Path, default=DATA, help="the measurements (YAML)")
    ap.add_argument("--readme", type=Path, default=README)
    args = ap.parse_args(argv)
    new = block(rows(load(args.data)))
    if args.write:
        args.readme.write_text(replace_block(args.readme.read_text(), new))
        print(f"wrote the validation table into {args.readme}")
    else:
        print(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
