"""The what-if page's form: which scenario fields it shows, and the scenario document.

The page edits a scenario *document*, the same mapping a scenario YAML file holds (in the
one shape of pools: an uploaded file in an old shape is normalised). Each field of the
form is bound to one dotted path of it (:data:`FIELDS`); a field that picks a kind
(``scheduler.kind``, ``workload.arrival.process``, a length law's ``dist``) replaces the
mapping it sits in by that kind's template (:data:`TEMPLATES`), keeping the keys both
share; the deployment's field (the first pool's ``role``) replaces ``cluster.pools`` by one
pool or a prefill and a decode pool, keeping their GPU and TP; a toggle adds or removes an
optional mapping (``slo``, ``workload.shared_prefix``, ``workload.conversations``).
Anything the form has no field for is edited as YAML. The document is validated by
:func:`des.scenario.load_scenario`, as ``des run`` validates a file, so an error reads as
the CLI's ``error: <path>: <problem>`` line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, get_args

import yaml

from des import catalog
from des.catalog.precision import KVDtype, WeightDtype
from des.engine.deployment import normalise
from des.engine.router import ROUTERS
from des.errors import ScenarioError
from des.scenario import default_scenario_path, parse_yaml, read_yaml
from des.workload.formats import TRACE_FORMATS

_CONTINUOUS = ["continuous"]
_LENGTHS = {
    "lognormal": {"dist": "lognormal", "mean": 512, "sigma": 0.6},
    "geometric": {"dist": "geometric", "mean": 128},
    "fixed": {"dist": "fixed", "value": 256},
    "uniform": {"dist": "uniform", "low": 16, "high": 1024},
}

#: A kind's starting mapping, by the dotted path of the mapping it replaces and the kind.
TEMPLATES: dict[str, dict[str, Any]] = {
    "scheduler": {
        "continuous": {
            "kind": "continuous",  # max_num_seqs, max_num_batched_tokens: vLLM's defaults for the GPU
            "enable_chunked_prefill": True,
            "enable_prefix_caching": True,
        },
        "static": {"kind": "static", "max_batch_size": 32, "max_wait": 0.05},
    },
    # the deployment, by its first pool's role: one pool serving whole requests, or a split
    "cluster.pools": {
        "both": [{"role": "both", "instances": 1}],
        "prefill": [{"role": "prefill", "instances": 1}, {"role": "decode", "instances": 1}],
    },
    "workload.arrival": {
        "poisson": {"process": "poisson", "rate": 4.0},
        "gamma": {"process": "gamma", "rate": 4.0, "cv": 3.0},
        "closed": {"process": "closed", "concurrency": 32, "think_time": 0.0},
        "trace": {"process": "trace", "path": ""},
    },
    "workload.prompt_tokens": _LENGTHS,
    "workload.output_tokens": _LENGTHS,
    "slo": {"on": {"ttft": 2.0, "tpot": 0.1}},
    "workload.shared_prefix": {"on": {"tokens": 1024, "groups": 4}},
    "workload.conversations": {
        "on": {"turns": {"dist": "geometric", "mean": 4}, "think_time": {"dist": "exponential", "mean": 30.0}}
    },
}


def carried() -> dict[str, list[str]]:
    """For each mapping whose kind the form picks, the keys every kind it offers accepts
    (besides the kind): a change of kind keeps them (``scheduler.gpu_memory_utilization``
    stays when continuous batching becomes static), so two kinds compare like for like."""
    from des.engine.schedulers import SCHEDULERS
    from des.workload.arrivals import ARRIVALS
    from des.workload.lengths import LENGTHS

    registries = {"scheduler": SCHEDULERS, "workload.arrival": ARRIVALS}
    registries |= {f"workload.{key}": LENGTHS for key in ("prompt_tokens", "output_tokens")}
    out = {}
    for path, registry in registries.items():
        fields = [set(registry.get(kind).model_fields) for kind in TEMPLATES[path]]  # type: ignore[attr-defined]
        out[path] = sorted(set.intersection(*fields) - {"kind", "process", "dist"})
    out["cluster.pools"] = ["gpu", "tp"]  # a pool's hardware, whatever role it plays
    return out


def _field(path: str, label: str, kind: str = "number", group: str = "", **more: Any) -> dict[str, Any]:
    """One field: ``kind`` number | int | text | select | check | toggle | file | override
    (the GPU given inline: its catalog entry as ``base`` with the figures of
    :func:`gpu_figures` to edit); ``when``:
    shown only while each named path holds one of the listed values (``*``: is set);
    ``default``: what des takes when the field is left out (shown, never written); a
    select's option ``""`` leaves the key out, ``labels`` name its options; ``replaces``:
    the path a select replaces by its option's template (the deployment's pools);
    ``slider``: [min, max, step] of a slider beside a number's box, which runs the
    scenario as it moves."""
    return {"path": path, "label": label, "kind": kind, "group": group, **more}


def fields() -> list[dict[str, Any]]:
    """The form's fields, in order, with their choices read off the catalog and registries."""
    sched = {"scheduler.kind": _CONTINUOUS}
    one, split = {"cluster.pools.0.role": ["both"]}, {"cluster.pools.0.role": ["prefill"]}
    arrival = "workload.arrival.process"
    out = [
        _field("gpu", "GPU", "select", "hardware", options=catalog.gpu_names()),
        _field("gpu.base", "override its figures", "override", "hardware"),
        _field("gpu.memory_bytes", "memory (bytes)", "int", "hardware", when={"gpu.base": ["*"]}),
        _field("gpu.memory_bandwidth", "memory bandwidth (B/s)", "number", "hardware", when={"gpu.base": ["*"]}),
        _field("gpu.flops.bf16", "bf16 peak (FLOP/s)", "number", "hardware", when={"gpu.base": ["*"]}),
        _field("model", "model", "select", "hardware", options=catalog.model_names()),
        _field("precision.weights", "weights", "select", "hardware", options=["", *get_args(WeightDtype)],
               default="(the model's own)"),
        _field("precision.kv_cache_dtype", "KV cache", "select", "hardware", options=["", *get_args(KVDtype)],
               default="(the model's own)"),
        _field("cluster.pools.0.role", "deployment", "select", "hardware", options=list(TEMPLATES["cluster.pools"]),
               labels={"both": "one pool (colocated)", "prefill": "prefill + decode pools"},
               replaces="cluster.pools"),
        _field("cluster.pools.0.instances", "instances (replicas, or P)", "int", "hardware", default=1),
        _field("cluster.pools.1.instances", "decode instances (D)", "int", "hardware", default=1, when=split),
        _field("cluster.pools.0.tp", "tensor parallel", "int", "hardware", default=1),
        _field("cluster.pools.1.tp", "decode tensor parallel", "int", "hardware", default=1, when=split),
        _field("cluster.pools.0.pp", "pipeline stages", "int", "hardware", default=1, when=one),
        _field("cluster.pools.0.dp", "data-parallel ranks", "int", "hardware", default=1, when=one),
        _field("cluster.pools.0.router", "router", "select", "hardware", options=list(ROUTERS), when=one),
        _field("scheduler.kind", "scheduler", "select", "engine", options=list(TEMPLATES["scheduler"])),
        _field("scheduler.max_num_seqs", "max_num_seqs", "int", "engine", when=sched),
        _field("scheduler.max_num_batched_tokens", "max_num_batched_tokens", "int", "engine", when=sched),
        _field("scheduler.enable_chunked_prefill", "chunked prefill", "check", "engine", when=sched, default=True),
        _field("scheduler.enable_prefix_caching", "prefix caching", "check", "engine", when=sched, default=True),
        _field("scheduler.max_batch_size", "max_batch_size", "int", "engine", when={"scheduler.kind": ["static"]}),
        _field("scheduler.max_wait", "max_wait (s)", "number", "engine", when={"scheduler.kind": ["static"]}),
        _field(arrival, "arrivals", "select", "workload", options=list(TEMPLATES["workload.arrival"])),
        _field("workload.arrival.rate", "rate (req/s)", "number", "workload", when={arrival: ["poisson", "gamma"]},
               slider=[0.1, 40, 0.1]),
        _field("workload.arrival.cv", "burstiness (cv)", "number", "workload", when={arrival: ["gamma"]},
               slider=[0.25, 8, 0.25]),
        _field("workload.arrival.concurrency", "users", "int", "workload", when={arrival: ["closed"]}),
        _field("workload.arrival.think_time", "think time (s)", "number", "workload", when={arrival: ["closed"]}),
        _field("workload.arrival.path", "trace file", "file", "workload", when={arrival: ["trace"]}),
        _field("workload.arrival.format", "trace format", "select", "workload", when={arrival: ["trace"]},
               options=["", *TRACE_FORMATS], default="(from the file name)"),
        _field("workload.arrival.rate_scale", "rate scale", "number", "workload", when={arrival: ["trace"]}),
    ]  # fmt: skip
    for key, name in (("prompt_tokens", "prompt"), ("output_tokens", "output")):
        path = f"workload.{key}"
        dist = f"{path}.dist"
        out += [
            _field(dist, f"{name} length", "select", "workload", options=list(_LENGTHS)),
            _field(f"{path}.mean", f"{name} mean (tokens)", "number", "workload",
                   when={dist: ["lognormal", "geometric"]}),
            _field(f"{path}.sigma", f"{name} sigma (log)", "number", "workload", when={dist: ["lognormal"]}),
            _field(f"{path}.value", f"{name} tokens", "int", "workload", when={dist: ["fixed"]}),
            _field(f"{path}.low", f"{name} low", "int", "workload", when={dist: ["uniform"]}),
            _field(f"{path}.high", f"{name} high", "int", "workload", when={dist: ["uniform"]}),
        ]  # fmt: skip
    prefix, chats = "workload.shared_prefix", "workload.conversations"
    out += [
        _field(prefix, "shared prefix", "toggle", "workload"),
        _field(f"{prefix}.tokens", "prefix tokens", "int", "workload", when={prefix: ["*"]}),
        _field(f"{prefix}.groups", "prefix groups", "int", "workload", when={prefix: ["*"]}),
        _field(chats, "conversations", "toggle", "workload"),
        _field(f"{chats}.turns.mean", "turns (mean)", "number", "workload", when={chats: ["*"]}),
        _field(f"{chats}.think_time.mean", "think time (s, mean)", "number", "workload", when={chats: ["*"]}),
        _field("slo", "SLO", "toggle", "slo"),
        _field("slo.ttft", "TTFT (s)", "number", "slo", when={"slo": ["*"]}),
        _field("slo.tpot", "TPOT (s)", "number", "slo", when={"slo": ["*"]}),
        _field("slo.e2e", "end-to-end (s)", "number", "slo", when={"slo": ["*"]}),
        _field("horizon.duration", "duration (s)", "number", "run"),
        _field("warmup", "warm-up (s)", "number", "run"),
        _field("seed", "seed", "int", "run"),
    ]
    return out


def shown(field: Mapping[str, Any], doc: Mapping[str, Any]) -> bool:
    """Whether the form shows ``field`` for ``doc`` (its ``when`` holds, as the page decides)."""
    from des.dotted import get_dotted

    for path, values in field.get("when", {}).items():
        try:
            value = get_dotted(doc, path)
        except (KeyError, IndexError, TypeError):
            value = None
        if (value is None) if "*" in values else value not in values:
            return False
    return True


def empty_files(doc: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A problem for each file field the form shows that names no file yet ("choose a
    trace file"), rather than the reader's words for an empty path (the server's folder)."""
    from des.dotted import get_dotted

    out = []
    for f in fields():
        if f["kind"] != "file" or not shown(f, doc):
            continue
        try:
            value = get_dotted(doc, f["path"])
        except (KeyError, IndexError, TypeError):
            continue  # not given: validation says it is required
        if value is None or (isinstance(value, str) and not value.strip()):
            out.append((f["path"], f"choose a {f['label']}"))
    return out


def gpu_figures() -> dict[str, dict[str, Any]]:
    """The figures of each catalog GPU the form lets a user override (bytes, bytes/s, FLOP/s)."""
    out = {}
    for name in catalog.gpu_names():
        g = catalog.gpu(name)
        out[name] = {
            "memory_bytes": g.memory_bytes,
            "memory_bandwidth": g.memory_bandwidth,
            "flops": {"bf16": g.flops["bf16"]},
        }
    return out


def default_document() -> dict[str, Any]:
    """The embedded default scenario as a document (what ``des run`` with no file runs)."""
    return normalise(read_yaml(default_scenario_path()))[0]


def parse_document(data: bytes, name: str) -> dict[str, Any]:
    """A scenario document from an uploaded file's bytes; a problem raises
    :class:`ScenarioError` naming ``scenario``, in the words ``des run`` has for a file."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ScenarioError(("scenario", f"{name!r} is not UTF-8 text")) from None
    return normalise(parse_yaml(text, name))[0]


def document_yaml(doc: Mapping[str, Any]) -> str:
    """The document as the YAML file the page downloads (``des run`` reads it back)."""
    return yaml.safe_dump(dict(doc), sort_keys=False, allow_unicode=True)


def problems(exc: ScenarioError) -> list[dict[str, str]]:
    """A scenario's problems as the page shows them: each with its dotted path, its
    message and the CLI's whole ``error:`` line."""
    return [{"path": p, "message": m, "line": line} for (p, m), line in zip(exc.problems, exc.lines(), strict=True)]
