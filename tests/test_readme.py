"""The README's shell examples run when pasted into bash.

Every line of every ```sh block is run by ``bash -c``, in order, in a scratch folder
that looks like a checkout (``.venv``, ``scenarios``, ``analysis`` and ``data`` linked
in), so that quoting mistakes (``--slo ttft_p99<=2`` unquoted is a redirection) and
stale commands fail here. ``bench.json``, the README's stand-in for a user's own
``vllm bench serve`` result, is written first from a short des run. ``make run`` and
``make test`` are the exceptions: the first is checked from a clean clone by hand and
in CI's own ``make test``, the second is this suite.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.helpers import ROOT

BLOCK = re.compile(r"```sh\n(.*?)```", re.S)


def write_bench(path) -> None:
    """A vllm bench serve result of 100 requests, recorded from des itself."""
    import des
    from des.tools.compare import simulated_rows
    from des.workload.formats.vllm_bench import write_vllm_bench

    sc = des.load_scenario(None, ["horizon.duration=null", "horizon.num_requests=100", "warmup=0"])
    rows, _ = simulated_rows(des.simulate(sc).requests)
    write_vllm_bench(rows, path, {"model_id": "Qwen/Qwen2.5-7B-Instruct"})


def commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    lines = [line.strip() for block in BLOCK.findall(text) for line in block.splitlines()]
    return [line for line in lines if line and not line.startswith(("#", "make "))]


def test_the_readme_has_examples_and_quotes_every_slo():
    cmds = commands()
    assert any("des run" in c for c in cmds) and any("des capacity" in c for c in cmds)
    for c in cmds:
        for slo in re.findall(r"--slo (\S+)", c):
            assert slo.startswith("'"), f"unquoted SLO in: {c}"


@pytest.mark.slow
def test_every_readme_example_runs_in_bash(tmp_path):
    for name in (".venv", "scenarios", "analysis", "data"):
        (tmp_path / name).symlink_to(ROOT / name)
    write_bench(tmp_path / "bench.json")
    for cmd in commands():
        proc = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        assert "Traceback" not in proc.stderr, cmd
