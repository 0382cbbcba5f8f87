"""The what-if page's server (``des ui``), through its HTTP API: its runs are ``des run``'s,
its errors the CLI's lines, its YAML runs back to the same results, its jobs cancel
cleanly and replace one another per page, and its results browser stays inside its root.
The page itself, in a real browser, is tested in :mod:`tests.test_ui_browser`."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from des.scenario import load_scenario
from des.ui import bind, form, guard
from des.ui.app import create_app
from tests.helpers import ROOT, des_cli, start_ui, ui_address

SMALL = {"horizon": {"duration": 120}, "warmup": 10}
#: The page's address in these tests (the Host header a browser on it sends), and its token.
BASE, TOKEN = "http://127.0.0.1:8050", "test-token"


def small(**more: Any) -> dict[str, Any]:
    """The default scenario, shortened to 120 s, with ``more`` top-level keys."""
    return {**form.default_document(), **SMALL, **more}


@pytest.fixture(scope="module")
def client(tmp_path_factory) -> Any:
    results = tmp_path_factory.mktemp("results")
    with TestClient(create_app(results, token=TOKEN), base_url=BASE, headers={guard.HEADER: TOKEN}) as c:
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
    lines = [p["line"] for p in out["problems"]]
    # the same lines, naming the file by the name it was uploaded as, not the server's temporary path
    assert out["id"] is None and lines == cli.stderr.replace(str(Path(path).parent) + "/", "").strip().splitlines()
    assert "'bad.csv' lacks column(s)" in lines[0] and str(Path(path).parent) not in json.dumps(out)
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
    saved = json.loads((root / "one" / "summary.json").read_text())
    # the lines des run prints of the summary, its latency table, then every value, formatted and folded
    titles = [t["title"] for t in view["tables"]]
    assert titles[:3] == ["summary", "latency (seconds)", "every value of summary.json"]
    lines = dict(view["tables"][0]["rows"])
    assert lines["requests"].startswith(f"{saved['num_requests']:,} arrived: ")
    assert lines["stable"].startswith("yes" if saved["stable"] else "NO")
    assert list(lines) == ["requests", "load", "engine", "utilisation", "paid for", "stable"]
    from des.render.console import fmt

    latency = {row[0]: row[1:] for row in view["tables"][1]["rows"]}
    assert latency["ttft"] == [fmt(saved[f"ttft_{c}"]) for c in ("mean", "p50", "p90", "p95", "p99")]
    every = dict(view["tables"][2]["rows"])
    assert view["tables"][2]["folded"] and set(every) == set(saved)
    assert every["num_requests"] == f"{saved['num_requests']:,}" and every["stable"] in ("yes", "NO")
    assert every["slo_attainment"] == "-" and every["ttft_p99"] == fmt(saved["ttft_p99"])
    shown = [v for v in every.values() if v not in ("-", "yes", "NO")]
    assert not any(v in ("None", "True", "False") for v in every.values())
    assert all(len(v.replace(",", "").replace(".", "").lstrip("-0")) <= 7 for v in shown if v[0].isdigit())
    assert [t["title"] for t in view["texts"]] == ["scenario.yaml"]
    assert titles[3].startswith("windows") and "throughput_rps" in view["tables"][3]["columns"]
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
    assert shown["answer"] == plan["answer"] and shown["rate"] == "2"
    assert shown["winner.verdict"] == plan["winner"]["verdict"] == "pass"
    assert [t["title"] for t in view["tables"]] == ["plan", "candidates"]
    assert [t["title"] for t in view["texts"]] == ["winner.yaml"]
    assert view["figures"] == ["planned/pareto.png"]
    png = client.get("/api/results/file", params={"path": "planned/pareto.png"})
    assert png.status_code == 200 and png.content[:4] == b"\x89PNG"


def test_des_ui_prints_its_address_and_stops_cleanly_on_ctrl_c(tmp_path: Path):
    proc, line = start_ui(tmp_path, tmp_path)
    try:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/\?token=[A-Za-z0-9_-]{43}", line), line
        import urllib.error
        import urllib.request

        base, header = ui_address(line)
        with urllib.request.urlopen(urllib.request.Request(base + "api/form", headers=header), timeout=30) as r:
            assert json.load(r)["doc"]["name"] == "qwen7b-4090-poisson"
        with pytest.raises(urllib.error.HTTPError) as refused:  # the address without its token
            urllib.request.urlopen(base + "api/form", timeout=30)
        assert refused.value.code == 403
        with urllib.request.urlopen(line, timeout=30) as r:  # the printed address opens the page
            assert r.status == 200 and b"des what-if" in r.read()
            assert "HttpOnly" in r.headers["Set-Cookie"] and "SameSite=strict" in r.headers["Set-Cookie"]
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
        url, header = ui_address(_read_until(fd, lambda b: b"\n" in b).decode().strip())
        assert url.startswith("http://127.0.0.1:"), url
        body = json.dumps({"kind": "sweep", "doc": small(), "fractions": [0.3, 0.6, 0.9], "replications": 10})
        req = urllib.request.Request(url + "api/jobs", body.encode(), {"Content-Type": "application/json", **header})
        with urllib.request.urlopen(req, timeout=30) as r:
            jid = json.load(r)["id"]
        end = time.monotonic() + 60
        while True:  # until the sweep is running its runs
            asked = urllib.request.Request(f"{url}api/jobs/{jid}", headers=header)
            with urllib.request.urlopen(asked, timeout=30) as r:
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


# -- the guards of a page on 127.0.0.1 (reliability-review-4, S1-S7) ----------------------


def test_a_rebound_host_is_refused(client: TestClient):
    """DNS rebinding: a site whose name now points at 127.0.0.1 sends its own Host. It can
    neither read the results nor start a job; the loopback names are the page's."""
    root: Path = client.results  # type: ignore[attr-defined]
    (root / "r").mkdir(exist_ok=True)
    (root / "r" / "summary.json").write_text("{}")
    evil = {"Host": "rebind.attacker.example:8050", "Origin": "http://rebind.attacker.example:8050"}
    assert client.get("/api/results/file", params={"path": "r/summary.json"}, headers=evil).status_code == 400
    before = len(client.app.state.jobs._jobs)  # type: ignore[attr-defined]
    r = client.post("/api/jobs", json={"kind": "run", "doc": small()}, headers=evil)
    assert r.status_code == 400 and len(client.app.state.jobs._jobs) == before  # type: ignore[attr-defined]
    for host in ("127.0.0.1:8050", "localhost:8050", "[::1]:8050", "localhost"):
        assert client.get("/api/form", headers={"Host": host}).status_code == 200, host


def test_a_foreign_origin_cannot_change_state(client: TestClient):
    """A state-changing request whose Origin (or, without one, Referer) is another site's is
    refused, even with the token; the page's own, or a script's (neither header), is not."""
    before = len(client.app.state.jobs._jobs)  # type: ignore[attr-defined]
    job = {"kind": "run", "doc": small()}
    for header in (
        {"Origin": "http://attacker.example"},
        {"Origin": "null"},
        {"Origin": "http://127.0.0.1:9999"},
        {"Referer": "http://attacker.example/page.html"},
        {"Referer": "http://127.0.0.1:8050.attacker.example/"},
    ):
        r = client.post("/api/jobs", json=job, headers=header)
        assert r.status_code == 403 and r.json()["detail"].startswith("refused: a request from"), header
        assert client.post("/api/upload", params={"name": "t.csv"}, content=b"x", headers=header).status_code == 403
    assert len(client.app.state.jobs._jobs) == before  # type: ignore[attr-defined]
    assert client.post("/api/check", json=small(), headers={"Origin": BASE}).json() == {"problems": []}
    assert client.post("/api/check", json=small(), headers={"Referer": BASE + "/"}).json() == {"problems": []}


def test_without_the_token_nothing_answers(client: TestClient):
    """Another user of the machine, or a page's cross-site request (which the SameSite
    cookie does not go with), has no token: every route of the API refuses it, and a
    cross-site "simple" upload writes nothing. Opening the printed address stores it."""
    app = client.app
    uploads = app.state.uploads.folder  # type: ignore[attr-defined]
    kept = sorted(uploads.iterdir())
    stranger = TestClient(app, base_url=BASE)  # no "with": its end would end the app's lifespan
    for method, url in (
        ("GET", "/api/form"), ("GET", "/api/results"), ("GET", "/api/results/file?path=x.json"),
        ("GET", "/api/jobs/1-x"), ("POST", "/api/jobs"), ("POST", "/api/check"), ("POST", "/api/parse"),
        ("POST", "/api/upload?name=t.csv"), ("POST", "/api/scenario.yaml"), ("POST", "/api/jobs/1-x/cancel"),
    ):  # fmt: skip
        r = stranger.request(method, url, content=b"a: 1", headers={"Content-Type": "text/plain"})
        assert r.status_code == 403 and "des ui printed" in r.json()["detail"], (method, url)
    assert sorted(uploads.iterdir()) == kept
    assert stranger.get("/").status_code == 403
    assert stranger.get("/", params={"token": TOKEN + "x"}).status_code == 403
    assert stranger.get("/api/form", headers={guard.HEADER: "wrong"}).status_code == 403
    opened = stranger.get("/", params={"token": TOKEN})  # the printed address
    assert opened.status_code == 200 and "<title>des what-if</title>" in opened.text
    cookie = opened.headers["set-cookie"]
    assert cookie.startswith(f"des-token-8050={TOKEN};") and "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert stranger.get("/api/form").status_code == 200  # the cookie alone, as the page's requests carry it
    assert stranger.get("/").status_code == 200


SECRET = "secret: TOPSECRET-123\nmore: lines\n"


#: Each field that names a file, and a scenario's part setting it to ``path``.
FILE_FIELDS = {
    "workload.arrival.path": lambda path: {
        "workload": {"arrival": {"process": "trace", "path": path, "format": "csv"}}
    },
    "workload.arrival.schedule.path": lambda path: {
        "workload": {"arrival": {"process": "nhpp", "schedule": {"kind": "piecewise", "path": path}}}
    },
    "workload.prompt_tokens.path": lambda path: {"workload": {"prompt_tokens": {"dist": "empirical", "path": path}}},
    "gpu.calibration": lambda path: {"gpu": {"base": "rtx4090", "calibration": path}},
}


@pytest.mark.parametrize("field", list(FILE_FIELDS))
def test_the_page_reads_no_file_it_was_not_given(client: TestClient, tmp_path: Path, field: str):
    """A scenario sent to the page may name only files it uploaded, or under its results
    folder or working directory: /proc/self/environ and a secret elsewhere (or a link to it
    in the results folder) are refused by the field, before anything reads them, and
    nothing of them comes back."""
    from des.dotted import merge

    secret = tmp_path / "secret.csv"
    secret.write_text(SECRET)
    root: Path = client.results  # type: ignore[attr-defined]
    link = root / f"link-{field}.csv"
    link.unlink(missing_ok=True)
    link.symlink_to(secret)
    for path in ("/proc/self/environ", str(secret), str(link), "/etc/passwd"):
        doc = merge(small(), FILE_FIELDS[field](path))
        for out in (client.post("/api/check", json=doc).json(), submit(client, doc)):
            text = json.dumps(out)
            assert "TOPSECRET" not in text and "PATH=" not in text and "root:" not in text, text
            [problem] = out["problems"]
            assert problem["path"] == field, problem
            assert problem["message"].startswith("the page reads only files uploaded through it"), problem


def test_a_file_under_the_results_folder_is_read(client: TestClient):
    root: Path = client.results  # type: ignore[attr-defined]
    (root / "mine.csv").write_text("arrival_time,prompt_tokens,output_tokens\n0,10,5\n1,20,5\n")
    doc = small()
    doc["workload"]["arrival"] = {"process": "trace", "path": str(root / "mine.csv")}
    doc["horizon"] = {"duration": None}
    doc["warmup"] = 0
    assert client.post("/api/check", json=doc).json() == {"problems": []}


def test_trace_picked_without_a_file_asks_for_one(client: TestClient):
    """Picking "trace" before a file leaves the path empty: the page asks for the file,
    where the reader would name the server's working directory."""
    doc = small()
    doc["workload"]["arrival"] = dict(form.TEMPLATES["workload.arrival"]["trace"])
    out = submit(client, doc)
    assert [p["line"] for p in out["problems"]] == ["error: workload.arrival.path: choose a trace file"]
    assert str(Path.cwd()) not in json.dumps(out)


BOMB = (
    "a: &a ["
    + ", ".join(["lol"] * 10)
    + "]\n"
    + "".join(f"{n}: &{n} [" + ", ".join([f"*{p}"] * 10) + "]\n" for p, n in zip("abcde", "bcdef", strict=True))
)


def test_an_alias_bomb_is_one_problem(client: TestClient):
    """A few hundred bytes of nested YAML aliases stand for a million nodes: refused with
    one line while reading, never expanded (or sent back)."""
    assert len(BOMB) < 400
    r = client.post("/api/parse", content=BOMB.encode())
    [problem] = r.json()["problems"]
    assert r.json()["doc"] is None and len(r.content) < 1000
    assert problem["line"].startswith("error: scenario: 'scenario.yaml' line 1: not valid YAML (its aliases expand")
    assert "at most 100,000 more are allowed" in problem["line"]
    fine = client.post("/api/parse", content=b"a: &x {b: 1}\nc: *x\n").json()  # an anchor reused: fine
    assert fine["doc"] == {"a": {"b": 1}, "c": {"b": 1}}


def test_parsing_does_not_hold_up_the_server(client: TestClient, monkeypatch):
    """While a parse is being worked on, another request is answered: the work runs on the
    thread pool, not the event loop. The parse waits for that answer; on the event loop
    it would wait in vain (and say so)."""
    import threading

    answered = threading.Event()
    waited: list[bool] = []
    real = form.parse_document

    def slow(data: bytes, name: str) -> dict[str, Any]:
        waited.append(answered.wait(timeout=60))
        return real(data, name)

    monkeypatch.setattr(form, "parse_document", slow)
    out: list[Any] = []
    parse = threading.Thread(target=lambda: out.append(client.post("/api/parse", content=b"a: 1\n").json()))
    parse.start()
    assert client.get("/api/form").status_code == 200
    answered.set()
    parse.join()
    assert waited == [True] and out == [{"doc": {"a": 1}, "problems": []}]


def test_bodies_are_bounded(client: TestClient):
    """A JSON body beyond 8 MiB is refused, whether it says its length or streams."""
    from des.ui.app import MAX_BODY

    big = b"[" + b"0," * (MAX_BODY // 2) + b"0]"
    r = client.post("/api/check", content=big, headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["detail"] == "larger than the 8 MiB the page accepts"

    def chunks():
        for _ in range(9):
            yield b" " * 2**20

    r = client.post("/api/jobs", content=chunks(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["detail"] == "larger than the 8 MiB the page accepts"


def test_an_upload_streams_to_disk_and_is_bounded(tmp_path: Path):
    """An upload is written as it arrives: one past the bound is refused after reading just
    past it (not all of it), and leaves nothing behind."""
    import asyncio

    from des.ui.uploads import Refused, Uploads

    ups = Uploads(tmp_path / "up", max_bytes=10_000)
    sent = [0]

    async def body():
        for _ in range(1000):  # 1 MB offered
            sent[0] += 1
            yield b"x" * 1000

    with pytest.raises(Refused) as refused:
        asyncio.run(ups.save("big.csv", body()))
    assert refused.value.status == 413 and str(refused.value) == "larger than the 9.76562 KiB the page accepts"
    assert sent[0] == 11 and list(ups.folder.iterdir()) == []
    with pytest.raises(Refused):  # a declared length over the bound: refused before a byte is read
        asyncio.run(ups.save("big.csv", body(), declared=10**9))
    assert sent[0] == 11


def test_uploads_kept_are_bounded(client: TestClient, monkeypatch):
    """The page keeps its newest uploads only: at most KEEP of them, and MAX_TOTAL bytes."""
    ups = client.app.state.uploads  # type: ignore[attr-defined]
    monkeypatch.setattr(ups, "keep", 3)
    paths = [client.post("/api/upload", params={"name": f"t{i}.csv"}, content=b"a,b\n").json()["path"] for i in "12345"]
    assert [Path(p).exists() for p in paths] == [False, False, True, True, True]
    monkeypatch.setattr(ups, "max_total", 250)
    paths = [client.post("/api/upload", params={"name": f"u{i}.csv"}, content=b"x" * 100).json()["path"] for i in "123"]
    assert [Path(p).exists() for p in paths] == [False, True, True]
    assert sum(f.stat().st_size for f in ups.folder.rglob("*") if f.is_file()) <= 250


def test_an_upload_on_a_full_disk_says_so(client: TestClient, monkeypatch):
    """ENOSPC while writing (the kernel's own, from /dev/full) is a clear problem, not a 500."""
    from des.ui import uploads

    monkeypatch.setattr(uploads, "open_new", lambda path: open("/dev/full", "wb"))  # noqa: SIM115
    before = sorted(client.app.state.uploads.folder.iterdir())  # type: ignore[attr-defined]
    r = client.post("/api/upload", params={"name": "t.csv"}, content=b"x" * 100_000)
    assert r.status_code == 507 and r.json()["detail"] == "no space left on device: the upload was not kept"
    assert sorted(client.app.state.uploads.folder.iterdir()) == before  # type: ignore[attr-defined]


def test_a_sweep_s_grid_and_the_queue_are_bounded(client: TestClient, monkeypatch):
    """100,000 runs in one sweep, or more jobs than may wait, are one problem line each."""
    fractions = [0.0005 * (i + 1) for i in range(5000)]
    why = "5,000 loads x 20 replications is 100,000 runs; the page sweeps at most 240 (des sweep runs more)"
    out = client.post("/api/jobs", json={"kind": "sweep", "doc": small(), "fractions": fractions, "replications": 20})
    assert out.json() == {
        "id": None,
        "problems": [{
            "path": "fractions",
            "message": why,
            "line": f"error: fractions: {why}",
        }],
    }  # fmt: skip
    jobs = client.app.state.jobs  # type: ignore[attr-defined]
    monkeypatch.setattr(jobs, "max_queued", 1)
    long = small(horizon={"duration": 20000})
    ids = [submit(client, long, owner=f"tab-{i}")["id"] for i in range(3)]  # two run, one waits
    try:
        refused = submit(client, long, owner="tab-4")
        assert refused["id"] is None and [p["line"] for p in refused["problems"]] == [
            "error: jobs: 1 jobs are waiting already: cancel one, or wait for them to finish"
        ]
        again = submit(client, long, owner="tab-2", replace=True)  # a page's own newer run replaces its waiting one
        assert again["id"] is not None
        ids.append(again["id"])
    finally:
        for jid in ids:
            client.post(f"/api/jobs/{jid}/cancel")
    assert finish(client, submit(client, small())["id"])["state"] == "done"


def test_an_entry_the_server_cannot_look_at_leaves_the_rest_listed(client: TestClient):
    """A link whose target cannot even be looked at (its name is too long for the system)
    is left out of the listing; the results beside it are listed, not a 500."""
    root: Path = client.results  # type: ignore[attr-defined]
    r = des_cli("run", "--set", "horizon.duration=30", "--set", "warmup=0", "--out", str(root / "listed"), "--quiet")
    assert r.returncode == 0, r.stderr
    (root / "unlookable").symlink_to("x" * 300)
    try:
        listing = client.get("/api/results")
        assert listing.status_code == 200
        paths = [e["path"] for e in listing.json()["entries"]]
        assert "listed" in paths and "unlookable" not in paths
        assert client.get("/api/results/view", params={"path": "unlookable"}).status_code == 404
        assert client.get("/api/results/file", params={"path": "unlookable"}).status_code == 404
    finally:
        (root / "unlookable").unlink()
