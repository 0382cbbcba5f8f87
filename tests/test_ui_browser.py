"""The what-if page in a real browser: headless Chromium (Debian's package) driven by
Playwright, against ``des ui`` started as a user starts it.

Each test checks the page against the CLI: the first view is ``des run``'s summary, a
changed rate is ``des run --set``'s, a bad trace shows ``des run``'s error line next to
the trace field, the downloaded YAML runs back to the page's numbers, a sweep draws its
figure, and two tabs and a cancelled sweep leave the server answering. ``make test``
runs them where Chromium is installed and says so where it is not; CI installs it and
sets ``DES_REQUIRE_BROWSER`` so that a missing browser fails instead of skipping.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import des_cli, start_ui

pytestmark = pytest.mark.browser

#: The summary cards the page shows, by summary key.
CARDS = ("throughput_rps", "output_tokens_per_s", "ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "stable")
#: Milliseconds a page may take to answer (a sweep, on two shared cores).
SLOW = 240_000


def chromium() -> str | None:
    """The Chromium to drive: ``DES_CHROMIUM``, else the first on the PATH."""
    if os.environ.get("DES_CHROMIUM"):
        return os.environ["DES_CHROMIUM"]
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if shutil.which(name):
            return shutil.which(name)
    return None


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    """The folder the page browses (``--results``), holding a sweep."""
    root = tmp_path_factory.mktemp("results")
    r = des_cli("sweep", "tests/fixtures/ui-sweep.yaml", "--out", str(root / "small-sweep"), "--quiet")
    assert r.returncode == 0, r.stderr
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory, results: Path) -> Iterator[str]:
    """``des ui --no-browser --port 0`` as a user starts it; its address."""
    proc, url = start_ui(results, tmp_path_factory.mktemp("ui"))
    try:
        assert url.startswith("http://127.0.0.1:"), proc.stderr.read()  # type: ignore[union-attr]
        yield url
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0 and "Traceback" not in err, err


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    exe = chromium()
    if exe is None:
        why = "Chromium is not installed (apt-get install chromium), so the page was not tested in a browser"
        if os.environ.get("DES_REQUIRE_BROWSER"):
            pytest.fail(why)
        pytest.skip(why)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        # as root (CI) Chromium runs only without its sandbox; a container's small /dev/shm crashes its tabs
        b = p.chromium.launch(executable_path=exe, args=["--no-sandbox", "--disable-dev-shm-usage"])
        yield b
        b.close()


@pytest.fixture
def page(browser: Any, server: str) -> Iterator[Any]:
    """A new tab on the page, once its first run is shown."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.goto(server)
    pg.wait_for_selector("#status[data-state=done]", timeout=SLOW)
    yield pg
    context.close()
    assert not errors, errors


def shown(pg: Any) -> dict[str, Any]:
    """The summary cards' values, at full precision (their ``data-value``)."""
    return {k: json.loads(pg.get_attribute(f"#summary [data-key={k}]", "data-value")) for k in CARDS}


def set_field(pg: Any, path: str, value: str) -> None:
    """Type ``value`` into the field of ``path`` and leave it, as a person does."""
    sel = f"[data-path='{path}']"
    pg.fill(sel, value)
    pg.press(sel, "Tab")


def wait_for_rows(pg: Any, text: str) -> None:
    """Until the run on show is the one whose lines hold ``text`` (and it is done)."""
    pg.wait_for_function(
        "t => document.querySelector('#summary-rows').innerText.includes(t) "
        "&& document.querySelector('#status').dataset.state === 'done'",
        arg=text,
        timeout=SLOW,
    )


def wait_for_current(pg: Any) -> None:
    """Until the run on show is the form's scenario's."""
    pg.wait_for_function(
        "state.last && JSON.stringify(state.last.doc) === JSON.stringify(state.doc) "
        "&& document.querySelector('#status').dataset.state === 'done'",
        timeout=SLOW,
    )


def des_run(tmp_path: Path, *args: str) -> dict[str, Any]:
    out = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
    r = des_cli("run", *args, "--out", str(out), "--quiet", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return json.loads((out / "summary.json").read_text())


def test_the_first_view_is_des_run_without_a_click(page: Any, tmp_path: Path):
    summary = des_run(tmp_path)
    assert shown(page) == {k: summary[k] for k in CARDS}
    assert "2,411 arrived" in page.inner_text("#summary-rows")


def test_a_changed_rate_shows_what_des_run_gives(page: Any, tmp_path: Path):
    set_field(page, "workload.arrival.rate", "6.5")
    wait_for_rows(page, "poisson: rate 6.5")
    summary = des_run(tmp_path, "--set", "workload.arrival.rate=6.5")
    assert shown(page) == {k: summary[k] for k in CARDS}
    assert page.evaluate("state.last.result.summary") == summary


def test_a_rate_of_minus_one_shows_the_cli_line_next_to_the_field(page: Any, tmp_path: Path):
    set_field(page, "workload.arrival.rate", "-1")
    box = page.locator(".field[data-field='workload.arrival.rate'] .error")
    box.wait_for(timeout=SLOW)
    page.wait_for_function("document.querySelector(\".field[data-field='workload.arrival.rate'] .error\").innerText")
    cli = des_cli("run", "--set", "workload.arrival.rate=-1", cwd=tmp_path)
    assert (
        box.inner_text().splitlines()
        == cli.stderr.strip().splitlines()
        == ["error: workload.arrival.rate: must be > 0 (got -1)"]
    )


def test_a_bad_trace_shows_des_run_s_error_line_by_the_trace_field(page: Any, tmp_path: Path):
    bad = tmp_path / "bad.csv"
    bad.write_text("when,how many\nyesterday,lots\n")
    page.select_option("[data-path='workload.arrival.process']", "trace")
    page.set_input_files("[data-path='workload.arrival.path']", str(bad))
    page.wait_for_function(  # the uploaded file's problems (before it, the field asked for a file)
        "document.querySelector('#status').dataset.state === 'error' && "
        "document.querySelector(\".field[data-field='workload.arrival.path'] .error\").innerText.includes('bad.csv')",
        timeout=SLOW,
    )
    lines = page.locator(".field .error, #general-errors li").all_inner_texts()
    lines = [line for text in lines for line in text.splitlines() if line]
    doc = page.evaluate("state.doc")
    (tmp_path / "page.yaml").write_text(yaml.safe_dump(doc))
    cli = des_cli("run", "page.yaml", "--out", "x", cwd=tmp_path)
    uploaded = str(Path(doc["workload"]["arrival"]["path"]).parent) + "/"
    assert cli.returncode == 2 and uploaded in cli.stderr
    # des run's lines, naming the file as it was picked, not by the server's temporary path
    assert sorted(lines) == sorted(cli.stderr.replace(uploaded, "").strip().splitlines())
    assert "'bad.csv' lacks column(s)" in " ".join(lines) and uploaded not in page.content()
    trace_box = page.inner_text(".field[data-field='workload.arrival.path'] .error")
    assert trace_box.startswith("error: workload.arrival.path") or trace_box.startswith("error: workload.arrival")
    page.screenshot(path=str(tmp_path / "bad-trace.png"), full_page=True)


def test_the_downloaded_yaml_runs_back_to_the_page_s_numbers(page: Any, tmp_path: Path):
    page.select_option("[data-path='scheduler.kind']", "static")
    wait_for_rows(page, "static batching")
    assert page.evaluate("state.doc.scheduler") == {  # the memory settings every kind has are kept
        "kind": "static",  # (gpu_memory_utilization: the default scenario leaves it to vLLM's default)
        "max_batch_size": 32,
        "max_wait": 0.05,
        "block_size": 16,
    }
    set_field(page, "workload.arrival.rate", "2")
    wait_for_rows(page, "poisson: rate 2")
    with page.expect_download() as info:
        page.click("#download-yaml")
    path = tmp_path / info.value.suggested_filename
    info.value.save_as(path)
    assert path.name == "qwen7b-4090-poisson-edited.yaml"  # not the default's name: it was edited
    assert yaml.safe_load(path.read_text())["name"] == "qwen7b-4090-poisson-edited"
    summary = des_run(tmp_path, path.name)
    assert page.evaluate("state.last.result.summary") == summary
    assert shown(page) == {k: summary[k] for k in CARDS}


def test_a_small_sweep_draws_its_figure_with_progress(page: Any, tmp_path: Path):
    set_field(page, "horizon.duration", "150")
    wait_for_current(page)
    page.fill("#sweep-fractions", "0.3, 0.9")
    page.fill("#sweep-replications", "2")
    page.click("#sweep-button")
    page.wait_for_selector("#sweep-progress", state="visible", timeout=SLOW)  # progress shows while it runs
    page.wait_for_function(
        "() => { const i = document.querySelector('#sweep-figure'); "
        "return !document.querySelector('#sweep-result').hidden && i.complete && i.naturalWidth > 400; }",
        timeout=SLOW,
    )
    assert page.get_attribute("#sweep-progress", "value") == "1" or page.evaluate(
        "document.querySelector('#sweep-progress').value"
    ) == pytest.approx(1.0)
    assert page.inner_text("#sweep-capacity").startswith("capacity under p99 TTFT ≤ 2 s and median TPOT ≤ 0.1 s: ")
    assert len(page.locator("#sweep-points tr").all()) == 3  # a header and two loads
    png = tmp_path / "sweep.png"
    page.screenshot(path=str(png), full_page=True)
    assert png.read_bytes()[:4] == b"\x89PNG"
    page.click("#pin-a")
    page.wait_for_selector("#pins td[data-pin=A]", timeout=SLOW)
    assert page.inner_text("#pins tr[data-row=capacity] td[data-pin=A]") == page.evaluate(
        "state.lastSweep.result.capacity"
    )
    page.wait_for_function(  # the pinned sweep's figure, kept in the page
        "() => { const i = document.querySelector('#pin-figures img'); "
        "return i && i.complete && i.naturalWidth > 400; }",
        timeout=SLOW,
    )


def test_two_tabs_and_a_cancelled_sweep_leave_the_server_answering(browser: Any, server: str):
    context = browser.new_context()
    one, two = context.new_page(), context.new_page()
    for pg in (one, two):
        pg.goto(server)
        pg.wait_for_selector("#status[data-state=done]", timeout=SLOW)
    one.fill("#sweep-replications", "20")
    one.click("#sweep-button")
    one.wait_for_function("document.querySelector('#sweep-progress').value > 0", timeout=SLOW)
    set_field(two, "workload.arrival.rate", "3")  # the other tab runs while the sweep does
    one.click("#sweep-cancel")
    one.wait_for_function("document.querySelector('#sweep-status').innerText === 'cancelled'", timeout=SLOW)
    assert one.is_enabled("#sweep-button") and one.is_hidden("#sweep-figure")
    wait_for_rows(two, "poisson: rate 3")
    set_field(one, "workload.arrival.rate", "5")
    wait_for_rows(one, "poisson: rate 5")
    assert "poisson: rate 3" in two.inner_text("#summary-rows")  # one tab's runs do not replace the other's
    context.close()


def test_two_configurations_pinned_side_by_side(page: Any):
    page.click("#pin-a")
    page.wait_for_selector("#pins td[data-pin=A]", timeout=SLOW)
    page.select_option("[data-path='cluster.pools.0.role']", "prefill")
    wait_for_current(page)
    assert "1P+1D" in page.inner_text("#summary-rows") or "disaggregated" in page.inner_text("#summary-rows")
    page.click("#pin-b")
    page.wait_for_selector("#pins td[data-pin=B]", timeout=SLOW)
    a = page.evaluate("state.pins.A.result.summary")
    b = page.evaluate("state.pins.B.result.summary")
    assert a != b
    for key, label in (("ttft_p99", "TTFT p99 (s)"), ("throughput_rps", "throughput (req/s)")):
        row = f"#pins tr[data-row={key}]"
        assert page.inner_text(f"{row} td:first-child") == label
        assert page.inner_text(f"{row} td[data-pin=A]") == page.evaluate("v => fmt(v)", a[key])
        assert page.inner_text(f"{row} td[data-pin=B]") == page.evaluate("v => fmt(v)", b[key])
    assert page.inner_text("#pins tr[data-row=scheduler] td[data-pin=B]").startswith(
        "continuous: max_num_seqs 256 (vLLM default), max_num_batched_tokens 2048 (vLLM default), "
        "gpu_memory_utilization 0.9 (vLLM default), "
    )  # the default scenario leaves them to vLLM 0.19.1's vllm serve defaults for a 4090, resolved and marked
    assert (
        page.evaluate("state.pins.B.result.engine_defaults")
        == [{"gpu_memory_utilization": 0.9, "max_num_batched_tokens": 2048, "max_num_seqs": 256}] * 2
    )
    assert "pools prefill {instances 1}, decode {instances 1}" in page.inner_text(
        "#pins tr[data-row=scheduler] td[data-pin=B]"
    )
    for key in ("ttft_p99", "throughput_rps"):  # B against A, so no one compares 0.05206 and 0.009307 by eye
        assert page.inner_text(f"#pins tr[data-row={key}] td[data-ratio]") == "x" + page.evaluate(
            "([a, b]) => Number((b / a).toPrecision(3)).toString()", [a[key], b[key]]
        )
    assert page.inner_text("#pins tr th:last-child") == "B / A"
    assert page.inner_text("#pins tr[data-row=hardware] td[data-ratio]") == ""
    page.click("#pins button:text('Load A')")  # back to A's configuration, and its answer
    wait_for_current(page)
    assert page.evaluate("state.last.result.summary") == a


def test_the_results_browser_shows_a_sweep_and_its_figure(page: Any, results: Path):
    page.click("#tab-results")
    page.click("#results-list li[data-path='small-sweep']")
    page.wait_for_selector("#results-view h2:text('sweep: small-sweep')", timeout=SLOW)
    page.wait_for_function(
        "() => { const i = document.querySelector('#results-view img'); "
        "return i && i.complete && i.naturalWidth > 300; }",
        timeout=SLOW,
    )
    rows = page.locator("#results-view table.grid").first.locator("tr").all()
    assert len(rows) == 3  # a header and the sweep's two rates
    assert page.inner_text("#results-view details summary") == "study.yaml"
    assert "name: ui-sweep" in page.text_content("#results-view details pre")  # folded until opened
    page.click("#tab-whatif")
    assert page.is_visible("#form") and page.is_hidden("#results-view")


def test_the_gpu_overridden_inline(page: Any, tmp_path: Path):
    """Overriding the GPU starts from its catalog figures (the same run), and a faster
    memory shortens the decode steps; a bad figure shows the CLI's line by its field."""
    before = page.evaluate("state.last.result.summary")
    page.check("[data-path='gpu.base']")
    wait_for_current(page)
    assert page.evaluate("state.doc.gpu.base") == "rtx4090"
    assert page.input_value("[data-path='gpu.memory_bandwidth']") == "1008000000000"
    assert page.evaluate("state.last.result.summary") == before
    set_field(page, "gpu.memory_bandwidth", "2.016e12")
    wait_for_current(page)
    after = page.evaluate("state.last.result.summary")
    assert after["tpot_p50"] < 0.75 * before["tpot_p50"]
    set_field(page, "gpu.memory_bandwidth", "-1")
    box = ".field[data-field='gpu.memory_bandwidth'] .error"
    page.wait_for_function(f'document.querySelector("{box}").innerText', timeout=SLOW)
    assert page.inner_text(box) == "error: gpu.memory_bandwidth: must be > 0 (got -1)"
    page.uncheck("[data-path='gpu.base']")
    wait_for_current(page)
    assert page.evaluate("state.doc.gpu") == "rtx4090" and page.is_hidden("[data-path='gpu.memory_bandwidth']")


def test_the_rate_slider_runs_as_it_moves(page: Any):
    for rate in ("7.5", "1.5"):
        page.fill("[data-slider='workload.arrival.rate']", rate)  # a drag, ending at rate
        wait_for_rows(page, f"poisson: rate {rate}")
        assert page.input_value("[data-path='workload.arrival.rate']") == rate
        assert page.evaluate("state.doc.workload.arrival.rate") == float(rate)


def test_a_long_run_is_cancelled_by_its_button(page: Any):
    set_field(page, "horizon.duration", "50000")  # about a minute of simulation
    page.wait_for_function(
        "state.runId && document.querySelector('#status').innerText.includes('s simulated')", timeout=SLOW
    )
    assert page.is_enabled("#run-cancel") and 0 < page.evaluate("document.querySelector('#run-progress').value") < 1
    page.click("#run-cancel")
    page.wait_for_selector("#status[data-state=cancelled]", timeout=SLOW)
    assert page.is_disabled("#run-cancel")
    set_field(page, "horizon.duration", "120")
    wait_for_current(page)


def test_an_uploaded_trace_is_replayed_as_des_run_replays_it(page: Any, tmp_path: Path):
    trace = tmp_path / "mine.csv"
    rows = [f"{0.5 * i:.1f},{200 + 10 * i},{20 + i}" for i in range(40)]
    trace.write_text("arrival_time,prompt_tokens,output_tokens\n" + "\n".join(rows) + "\n")
    page.select_option("[data-path='workload.arrival.process']", "trace")
    page.set_input_files("[data-path='workload.arrival.path']", str(trace))
    set_field(page, "warmup", "0")
    wait_for_current(page)
    assert page.inner_text(".field[data-field='workload.arrival.path'] .note") == "now: mine.csv"
    assert "40 arrived: 40 completed" in page.inner_text("#summary-rows")
    doc = page.evaluate("state.doc")
    (tmp_path / "page.yaml").write_text(yaml.safe_dump(doc))
    assert page.evaluate("state.last.result.summary") == des_run(tmp_path, "page.yaml")


def test_trace_without_a_file_asks_for_one(page: Any):
    page.select_option("[data-path='workload.arrival.process']", "trace")
    box = ".field[data-field='workload.arrival.path'] .error"
    page.wait_for_function(f'document.querySelector("{box}").innerText', timeout=SLOW)
    assert page.inner_text(box) == "error: workload.arrival.path: choose a trace file"


def test_the_results_browser_formats_a_run(page: Any, results: Path, tmp_path: Path):
    """A run folder shows des run's lines and latency table, numbers rounded; every value of
    summary.json is folded away, formatted (no None or True)."""
    r = des_cli("run", "--set", "horizon.duration=30", "--set", "warmup=0", "--out", str(results / "a-run"), "--quiet")
    assert r.returncode == 0, r.stderr
    page.click("#tab-results")
    page.click("#results-list li[data-path='a-run']")
    page.wait_for_selector("#results-view h2:text('run: a-run')", timeout=SLOW)
    text = page.inner_text("#results-view")
    assert "requests" in text and " arrived: " in text and "latency (seconds)" in text
    assert page.is_hidden("#results-view details table[data-table='every value of summary.json']")
    cells = page.locator("#results-view td").all_inner_texts()
    assert not {"None", "True", "False", "null", "true", "false"} & set(cells)
    assert not [c for c in cells if len(c) > 12 and c.replace(".", "").replace("-", "").isdigit()]  # no 16 digits
    page.screenshot(path=str(tmp_path / "results-run.png"), full_page=True)
