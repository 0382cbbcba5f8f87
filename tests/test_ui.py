"""The what-if page's server (``des ui``), through its HTTP API: its runs are ``des run``'s,
its errors the CLI's lines, its YAML runs back to the same results, its jobs cancel
cleanly and replace one another per page, and its results browser stays inside its root.
The page itself, in a real browser, is tested in :mod:`tests.test_ui_browser`."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from des.scenario import load_scenario
from des.ui import bind, form
from des.ui.app import create_app
from tests.helpers import ROOT, des_cli, start_ui

SMALL = {"horizon": {"duration": 120}, "warmup": 10}


def small(**more: Any) -> dict[str, Any]:
    """The default scenario, shortened to 120 s, with ``more`` top-level keys."""
    return {**form.default_document(), **SMALL, **more}


@pytest.fixture(scope="module")
def client(tmp_path_factory) -> Any:
    results = tmp_path_factory.mktemp("results")
    with TestClient(create_app(results)) as c:
        c.results = results  # type: ignore[attr-defined]
        yield c


def finish(client: TestClient, jid: str, timeout: float = 120) -> dict[str, Any]:
    """The job's last state, once it is done, failed or cancelled."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        job = client.get(f"/api/jobs/{jid}").json()
        if job["state"] in ("done", "error", "cancelled"):
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {jid} still {job['state']} after {timeout} s")


def submit(client: TestClient, doc: dict[str, Any], **more: Any) -> dict[str, Any]:
    r = client.post("/api/jobs", json={"kind": "run", "doc": doc, **more})
    assert r.status_code == 200, r.text
    return r.json()


def test_the_form_is_the_default_scenario_and_its_fields_exist():
    spec = form.fields()
    paths = {f["path"] for f in spec}
    assert len(paths) == len(spec), "one field per path"
    for f in spec:
        for when in f.get("when", {}):
            assert when in paths, f"{f['path']} is shown by {when}, which no field sets"
        if f["kind"] == "select" and f["path"].split(".")[-1] in ("kind", "process", "dist"):
            parent = f["path"].rpartition(".")[0]
            assert set(f["options"]) <= set(form.TEMPLATES[parent]), f["path"]
        if "replaces" in f:
            assert set(f["options"]) == set(form.TEMPLATES[f["replaces"]]), f["path"]
    assert load_scenario(form.default_document()) == load_scenario(None)


@pytest.mark.parametrize(
    "parent,kind",
    [(p, k) for p, kinds in form.TEMPLATES.items() for k in kinds if (p, k) != ("workload.arrival", "trace")],
)
def test_every_template_makes_a_valid_scenario(parent: str, kind: str):
    """Each kind the form offers, picked on the default scenario, is a scenario des runs."""
    from des.dotted import set_dotted

    doc = form.default_document()
    set_dotted(doc, parent, form.TEMPLATES[parent][kind])
    load_scenario(doc)


def test_a_run_is_des_run(client: TestClient, tmp_path: Path):
    """The page's run of a scenario gives des run's summary.json exactly, key for key."""
    doc = small()
    doc["workload"]["arrival"]["rate"] = 6.0
    job = finish(client, submit(client, doc)["id"])
    assert job["state"] == "done", job
    path = tmp_path / "s.yaml"
    path.write_text(client.post("/api/scenario.yaml", json=doc).text)
    r = des_cli("run", str(path), "--out", str(tmp_path / "out"), "--quiet")
    assert r.returncode == 0, r.stderr
    assert job["result"]["summary"] == json.loads((tmp_path / "out" / "summary.json").read_text())
    assert job["result"]["summary"]["throughput_rps"] > 5  # the rate changed what was run
    rows = dict(job["result"]["rows"])
    assert rows["workload"] == "poisson: rate 6" and rows["stable"].startswith("yes")


def test_the_yaml_download_is_the_document(client: TestClient):
    doc = small(name="my what-if")
    r = client.post("/api/scenario.yaml", json=doc)
    assert r.headers["content-disposition"] == 'attachment; filename="my_what-if.yaml"'
    assert form.parse_document(r.content, "x.yaml") == doc


def test_a_bad_field_is_the_cli_line(client: TestClient):
    doc = small()
    doc["workload"]["arrival"]["rate"] = -1
    out = submit(client, doc)
    assert out["id"] is None
    cli = des_cli("run", "--set", "workload.arrival.rate=-1", "--out", "/nonexistent/x")
    assert cli.returncode == 2
    assert [p["line"] for p in out["problems"]] == cli.stderr.strip().splitlines()
    assert out["problems"][0]["path"] == "workload.arrival.rate"


def test_an_uploaded_scenario_with_an_unknown_key_is_the_cli_line(client: TestClient, tmp_path: Path):
    text = (ROOT / "des" / "scenarios" / "default.yaml").read_text() + "colour: blue\n"
    out = client.post("/api/parse", params={"name": "mine.yaml"}, content=text.encode()).json()
    assert out["doc"] is not None  # it parses: the key is caught where des run catches it, in validation
    bad = submit(client, out["doc"])
    (tmp_path / "mine.yaml").write_text(text)
    cli = des_cli("run", "mine.yaml", "--out", "x", cwd=tmp_path)
    assert [p["line"] for p in bad["problems"]] == cli.stderr.strip().splitlines()
    assert "colour" in bad["problems"][0]["line"]
    broken = client.post("/api/parse", params={"name": "mine.yaml"}, content=b"a: [1,\n").json()
    (tmp_path / "mine.yaml").write_text("a: [1,\n")
    cli = des_cli("run", "mine.yaml", "--out", "x", cwd=tmp_path)
    assert [p["line"] for p in broken["problems"]] == cli.stderr.strip().splitlines()


def test_a_bad_uploaded_trace_is_the_cli_line(client: TestClient, tmp_path: Path):
    """An uploaded trace that cannot be read names the trace field, as des run does."""
    data = b"when,how many\nyesterday,lots\n"
    path = client.post("/api/upload", params={"name": "../../bad.csv"}, content=data).json()["path"]
    assert Path(path).name == "bad.csv" and Path(path).read_bytes() == data  # kept in the server's folder
    doc = small()
    doc["workload"] = {"arrival": {"process": "trace", "path": path}}
    out = submit(client, doc)
    cli = des_cli("run", "--set", f"workload.arrival={{process: trace, path: {path}}}", "--out", str(tmp_path))
    assert cli.returncode == 2
    assert out["id"] is None and [p["line"] for p in out["problems"]] == cli.stderr.strip().splitlines()
    assert out["problems"][0]["path"].startswith("workload.arrival")


@pytest.mark.parametrize(
    "doc",
    [
        {"workload": 5},
        {"horizon": {"duration": "soon"}, "workload": {"arrival": {"process": "poisson", "rate": 1}}},
        {"gpu": {"base": 7}},
        {"gpu": "rtx4091"},
        {"cluster": {"replicas": 10**9}},
        {"workload": {"arrival": {"process": "trace", "path": "/nonexistent/trace.csv"}}},
        {"scheduler": {"kind": "disaggregated", "prefill": {"instances": 0}}},
    ],
)
def test_a_malformed_scenario_is_lines_and_the_server_goes_on(client: TestClient, doc: dict[str, Any]):
    out = submit(client, {**small(), **doc})
    assert out["id"] is None and out["problems"]
    assert all(p["line"].startswith("error: ") and "\n" not in p["line"] for p in out["problems"])
    assert client.get("/api/form").status_code == 200


def test_a_malformed_request_is_refused_without_harm(client: TestClient):
    assert (
        client.post("/api/jobs", content=b"not json", headers={"Content-Type": "application/json"}).status_code == 422
    )
    assert client.post("/api/jobs", json={"kind": "rm -rf", "doc": {}}).status_code == 422
    assert client.post("/api/jobs", json={"kind": "run", "doc": []}).status_code == 422
    assert client.get("/api/jobs/nope").status_code == 404
    assert client.post("/api/jobs/nope/cancel").status_code == 404
    assert client.get("/api/jobs/nope/figure.png").status_code == 404
    sweep = {"kind": "sweep", "doc": small(), "fractions": [0.5, -1]}
    assert client.post("/api/jobs", json=sweep).json()["problems"][0]["line"] == (
        "error: fractions: each must be > 0 and <= 3 (got -1)"
    )
    assert finish(client, submit(client, small())["id"])["state"] == "done"


def test_a_page_s_runs_replace_each_other_but_not_another_page_s(client: TestClient):
    docs = [small(), small(), small()]
    docs[2]["workload"]["arrival"]["rate"] = 2.0
    first = submit(client, docs[0], owner="tab-1", replace=True)["id"]
    second = submit(client, docs[1], owner="tab-1", replace=True)["id"]
    other = submit(client, docs[2], owner="tab-2", replace=True)["id"]
    assert finish(client, first)["state"] == "cancelled"
    assert finish(client, second)["state"] == "done"
    assert finish(client, other)["state"] == "done"


def test_a_sweep_cancelled_mid_run_ends_its_processes_and_the_server_goes_on(client: TestClient):
    r = client.post(
        "/api/jobs", json={"kind": "sweep", "doc": small(), "fractions": [0.3, 0.6, 0.9], "replications": 8}
    )
    jid = r.json()["id"]
    end = time.monotonic() + 60
    while client.get(f"/api/jobs/{jid}").json()["message"] in ("starting", "", "measuring saturation"):
        assert time.monotonic() < end
        time.sleep(0.05)
    job = client.app.state.jobs.get(jid)  # type: ignore[attr-defined]
    pgid = job.process.pid
    assert client.post(f"/api/jobs/{jid}/cancel").json()["state"] == "cancelled"
    end = time.monotonic() + 10
    while _group_alive(pgid):  # the job's process leads the group: it and its workers
        assert time.monotonic() < end, "the sweep's processes outlived its cancellation"
        time.sleep(0.1)
    assert finish(client, submit(client, small())["id"])["state"] == "done"


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_job_killed_from_outside_is_an_error_line(client: TestClient):
    jid = submit(client, small(horizon={"duration": 20000}))["id"]
    end = time.monotonic() + 60
    while client.get(f"/api/jobs/{jid}").json()["progress"] is None:  # until it simulates
        assert time.monotonic() < end
        time.sleep(0.05)
    os.kill(client.app.state.jobs.get(jid).process.pid, signal.SIGKILL)  # type: ignore[attr-defined]
    job = finish(client, jid)
    assert job["state"] == "error"
    assert [p["line"] for p in job["problems"]] == ["error: internal: the job's process ended with status -9"]
    assert finish(client, submit(client, small())["id"])["state"] == "done"


def test_a_sweep_draws_latency_against_load_and_the_capacity(client: TestClient):
    doc = small(slo={"ttft": 2.0, "tpot": 0.1})
    r = client.post("/api/jobs", json={"kind": "sweep", "doc": doc, "fractions": [0.3, 0.9, 1.2], "replications": 2})
    job = finish(client, r.json()["id"], timeout=300)
    assert job["state"] == "done", job
    res = job["result"]
    assert res["slo"] == {"ttft_p99": 2.0, "tpot_p50": 0.1}
    assert len(res["points"]["rows"]) == 3
    rates = [row[0] for row in res["points"]["rows"]]
    assert rates == sorted(rates) and res["saturation"] is not None
    assert rates[-1] == pytest.approx(1.2 * res["saturation"], rel=1e-3)
    assert res["capacity_value"] is None or 0 < res["capacity_value"] <= res["saturation"]
    png = client.get(f"/api/jobs/{job['id']}/figure.png")
    assert png.status_code == 200 and png.content[:8] == b"\x89PNG\r\n\x1a\n"
    svg = client.get(f"/api/jobs/{job['id']}/figure.svg")
    assert svg.status_code == 200 and b"<svg" in svg.content[:400]


def test_a_sweep_of_a_closed_loop_says_why_not(client: TestClient):
    doc = small()
    doc["workload"]["arrival"] = {"process": "closed", "concurrency": 8}
    r = client.post("/api/jobs", json={"kind": "sweep", "doc": doc, "fractions": [0.5]})
    out = r.json()
    job = finish(client, out["id"]) if out["id"] else {"problems": out["problems"], "state": "error"}
    assert job["state"] == "error"
    assert [p["path"] for p in job["problems"]] == ["workload.arrival.process"]
    assert job["problems"][0]["line"].startswith(
        "error: workload.arrival.process: the sweep varies the arrival rate, which closed arrivals do not have"
    )


def test_the_results_browser_stays_inside_its_root(client: TestClient):
    root: Path = client.results  # type: ignore[attr-defined]
    r = des_cli("run", "--set", "horizon.duration=60", "--set", "warmup=0", "--out", str(root / "one"), "--quiet")
    assert r.returncode == 0, r.stderr
    entries = client.get("/api/results").json()["entries"]
    assert [(e["path"], e["kind"]) for e in entries] == [("one", "run")]
    view = client.get("/api/results/view", params={"path": "one"}).json()
    summary = dict(view["tables"][0]["rows"])
    assert summary["num_requests"] == str(json.loads((root / "one" / "summary.json").read_text())["num_requests"])
    assert [t["title"] for t in view["texts"]] == ["scenario.yaml"]
    assert view["tables"][1]["title"].startswith("windows") and "throughput_rps" in view["tables"][1]["columns"]
    for bad in ("..", "../..", "/etc", "one/../../x"):
        assert client.get("/api/results/view", params={"path": bad}).status_code == 404
    assert client.get("/api/results/file", params={"path": "one/requests.parquet"}).status_code == 404
    assert client.get("/api/results/file", params={"path": "one/scenario.yaml"}).status_code == 200


def test_the_results_browser_draws_a_sweep(client: TestClient, tmp_path: Path):
    """A sweep kept elsewhere and linked into the folder is listed and shown."""
    root: Path = client.results  # type: ignore[attr-defined]
    elsewhere = tmp_path / "elsewhere"
    r = des_cli("sweep", str(ROOT / "tests" / "fixtures" / "ui-sweep.yaml"), "--out", str(elsewhere), "--quiet")
    assert r.returncode == 0, r.stderr
    (root / "swept").symlink_to(elsewhere)
    kinds = {e["path"]: e["kind"] for e in client.get("/api/results").json()["entries"]}
    assert kinds["swept"] == "sweep"  # and not the runs inside it
    assert not any(p.startswith("swept/") for p in kinds)
    view = client.get("/api/results/view", params={"path": "swept"}).json()
    assert view["tables"][0]["columns"][:2] == ["variant", "workload.arrival.rate"]
    assert [row[1] for row in view["tables"][0]["rows"]] == [1.0, 3.0]
    png = client.get("/api/results/figure.png", params={"path": "swept"})
    assert png.status_code == 200 and png.content[:4] == b"\x89PNG"
    assert client.get("/api/results/figure.png", params={"path": "one"}).status_code == 404  # a run: no curve


def test_the_results_browser_shows_a_plan(client: TestClient):
    root: Path = client.results  # type: ignore[attr-defined]
    args = ["--rate", "2", "--slo", "ttft_p99<=2", "--gpus", "rtx4090", "--max-gpus", "1", "--no-splits"]
    r = des_cli("plan", *args, "--replications", "2", "--out", str(root / "planned"))
    assert r.returncode == 0, r.stderr
    entries = client.get("/api/results").json()["entries"]
    assert [e["kind"] for e in entries if e["path"] == "planned"] == ["plan"]
    assert not any(e["path"].startswith("planned/") for e in entries)  # its runs are parts of it
    view = client.get("/api/results/view", params={"path": "planned"}).json()
    plan = json.loads((root / "planned" / "plan.json").read_text())
    shown = dict(view["tables"][0]["rows"])
    assert shown["answer"] == plan["answer"] and shown["rate"] == "2.0"
    assert shown["winner.verdict"] == plan["winner"]["verdict"] == "pass"
    assert [t["title"] for t in view["tables"]] == ["plan", "candidates"]
    assert [t["title"] for t in view["texts"]] == ["winner.yaml"]
    assert view["figures"] == ["planned/pareto.png"]
    png = client.get("/api/results/file", params={"path": "planned/pareto.png"})
    assert png.status_code == 200 and png.content[:4] == b"\x89PNG"


def test_des_ui_prints_its_address_and_stops_cleanly_on_ctrl_c(tmp_path: Path):
    proc, line = start_ui(tmp_path, tmp_path)
    try:
        assert line.startswith("http://127.0.0.1:") and line.endswith("/")
        import urllib.request

        with urllib.request.urlopen(line + "api/form", timeout=30) as r:
            assert json.load(r)["doc"]["name"] == "qwen7b-4090-poisson"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "stopped"
    assert not list(tmp_path.iterdir())  # it wrote nothing where it was run


def test_a_port_in_use_is_one_line(tmp_path: Path):
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    try:
        r = des_cli("ui", "--no-browser", "--port", str(port), cwd=tmp_path)
    finally:
        sock.close()
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        f"error: --port: cannot listen on 127.0.0.1:{port}: Address already in use (try --port 0)"
    ]


def _read_until(fd: int, done, timeout: float = 60) -> bytes:
    """What the terminal shows until ``done(bytes)`` holds, the program ends, or ``timeout``."""
    import select

    out = b""
    end = time.monotonic() + timeout
    while not done(out) and time.monotonic() < end:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the terminal's other end closed: the program ended
                break
            if not chunk:
                break
            out += chunk
    return out


def test_ctrl_c_at_a_terminal_stops_the_page_and_its_running_sweep(tmp_path: Path):
    """In a terminal, Ctrl-C reaches every process of the foreground group: the server
    stops with one line, and neither the fork server nor a running sweep prints a trace."""
    import pty
    import urllib.request

    pid, fd = pty.fork()
    if pid == 0:  # the child: des ui on the terminal
        os.chdir(tmp_path)
        os.execv(sys.executable, [sys.executable, "-m", "des.cli", "ui", "--no-browser", "--port", "0"])
    try:
        url = _read_until(fd, lambda b: b"\n" in b).decode().strip()
        assert url.startswith("http://127.0.0.1:"), url
        body = json.dumps({"kind": "sweep", "doc": small(), "fractions": [0.3, 0.6, 0.9], "replications": 10})
        req = urllib.request.Request(url + "api/jobs", body.encode(), {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            jid = json.load(r)["id"]
        end = time.monotonic() + 60
        while True:  # until the sweep is running its runs
            with urllib.request.urlopen(f"{url}api/jobs/{jid}", timeout=30) as r:
                job = json.load(r)
            if job["message"].endswith(" runs") or time.monotonic() > end:
                break
            time.sleep(0.1)
        assert job["state"] == "running", job
        os.write(fd, b"\x03")
        shown = _read_until(fd, lambda b: False, timeout=60).decode()
        _, status = os.waitpid(pid, 0)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert os.waitstatus_to_exitcode(status) == 0, shown
    assert shown.replace("\r", "").replace("^C", "").strip() == "stopped"
