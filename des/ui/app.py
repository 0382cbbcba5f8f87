"""The what-if page's web app: the page, its form's fields, jobs, downloads and the
results browser, as a FastAPI application over the same library calls as the CLI.

Every endpoint that reads or validates a scenario is a plain function, which FastAPI runs
on its thread pool: nothing a user sends can hold up the event loop, and simulations run
in the job processes of :mod:`des.ui.jobs`. A problem with what was sent comes back as
the CLI's ``error: <path>: <problem>`` lines (``problems``), with status 200 for a
scenario's problems (the page shows them next to their fields) and 4xx for a malformed
request.
"""

from __future__ import annotations

import re
import tempfile
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import Body, FastAPI, HTTPException, Query, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field

from des.errors import ScenarioError
from des.ui import browse, form
from des.ui.jobs import Jobs

STATIC = Path(__file__).parent / "static"
#: The largest file the page may upload (a trace or a scenario), bytes.
MAX_UPLOAD = 512 * 1024 * 1024


class JobRequest(BaseModel):
    """A run or a sweep of the scenario ``doc``; ``owner`` names the page (its tab) asking."""

    kind: str = Field(pattern="^(run|sweep)$")
    doc: dict[str, Any]
    owner: str = ""
    replace: bool = False
    fractions: list[float] = Field(default_factory=lambda: [0.2, 0.4, 0.6, 0.8, 0.9, 1.0, 1.1], min_length=1)
    replications: int = Field(3, ge=2, le=20)


def create_app(results: Path, max_running: int = 2) -> FastAPI:
    """The app, browsing ``results`` and keeping its jobs' and uploads' files in a
    temporary folder it removes when it stops."""
    scratch = Path(tempfile.mkdtemp(prefix="des-ui-"))
    uploads = scratch / "uploads"
    uploads.mkdir()
    jobs = Jobs(scratch / "jobs", max_running=max_running)

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        yield
        jobs.shutdown()
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)

    app = FastAPI(title="des what-if", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.jobs = jobs
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/")
    def index() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    @app.get("/api/form")
    def form_spec() -> dict[str, Any]:
        return {
            "doc": form.default_document(),
            "fields": form.fields(),
            "templates": form.TEMPLATES,
            "gpus": form.gpu_figures(),
            "carried": form.carried(),
        }

    @app.post("/api/check")
    def check(doc: Annotated[dict[str, Any], Body()]) -> dict[str, Any]:
        return {"problems": _problems(doc)}

    @app.post("/api/jobs")
    def submit(req: JobRequest) -> dict[str, Any]:
        problems = _problems(req.doc)
        if problems:
            return {"id": None, "problems": problems}
        if req.kind == "sweep":
            bad = [f for f in req.fractions if not 0 < f <= 3]
            if bad:
                problem = ScenarioError(("fractions", f"each must be > 0 and <= 3 (got {bad[0]:g})"))
                return {"id": None, "problems": form.problems(problem)}
        args = {"doc": req.doc, "fractions": sorted(set(req.fractions)), "replications": req.replications}
        job = jobs.submit(req.kind, args, owner=req.owner, replace=req.replace)
        return {"id": job.id, "problems": []}

    @app.get("/api/jobs/{jid}")
    def status(jid: str) -> dict[str, Any]:
        return _job(jid).view()

    @app.post("/api/jobs/{jid}/cancel")
    def cancel(jid: str) -> dict[str, Any]:
        job = jobs.cancel(jid)
        if job is None:
            raise HTTPException(404, f"no job {jid}")
        return job.view()

    @app.get("/api/jobs/{jid}/figure.{fmt}")
    def job_figure(jid: str, fmt: str) -> FileResponse:
        job = _job(jid)
        path = job.folder / f"sweep.{fmt}"
        if fmt not in ("png", "svg") or job.state != "done" or not path.is_file():
            raise HTTPException(404, "no such figure")
        media = browse.SHOWN[f".{fmt}"]
        return FileResponse(path, media_type=media, filename=f"{_stem(job.args['doc'])}-sweep.{fmt}")

    @app.post("/api/scenario.yaml")
    def download(doc: Annotated[dict[str, Any], Body()]) -> Response:
        name = f"{_stem(doc)}.yaml"
        return Response(
            form.document_yaml(doc),
            media_type="application/x-yaml",
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )

    @app.post("/api/parse")
    async def parse(request: Request, name: Annotated[str, Query()] = "scenario.yaml") -> JSONResponse:
        data = await _body(request)
        try:
            doc = form.parse_document(data, name)
        except ScenarioError as exc:
            return JSONResponse({"doc": None, "problems": form.problems(exc)})
        return JSONResponse({"doc": doc, "problems": []})

    @app.post("/api/upload")
    async def upload(request: Request, name: Annotated[str, Query()]) -> dict[str, Any]:
        data = await _body(request)
        folder = Path(tempfile.mkdtemp(dir=uploads))
        path = folder / (re.sub(r"[^A-Za-z0-9._-]", "_", Path(name).name).lstrip(".") or "trace")
        path.write_bytes(data)
        return {"path": str(path)}

    @app.get("/api/results")
    def results_list() -> dict[str, Any]:
        return {"root": str(results), "entries": browse.entries(results)}

    @app.get("/api/results/view")
    def results_view(path: str) -> dict[str, Any]:
        try:
            return browse.view(results, path)
        except browse.NotFound:
            raise HTTPException(404, f"no result folder {path!r} under {results}") from None

    @app.get("/api/results/file")
    def results_file(path: str) -> FileResponse:
        try:
            file, media = browse.file(results, path)
        except browse.NotFound:
            raise HTTPException(404, f"no file {path!r} under {results}") from None
        return FileResponse(file, media_type=media, filename=file.name)

    @app.get("/api/results/figure.{fmt}")
    def results_figure(path: str, fmt: str) -> Response:
        if fmt not in ("png", "svg"):
            raise HTTPException(404, "png or svg")
        try:
            data = browse.sweep_figure(results, path, fmt)
        except browse.NotFound:
            raise HTTPException(404, f"{path!r} is not a sweep over the arrival rate") from None
        return Response(data, media_type=browse.SHOWN[f".{fmt}"])

    def _job(jid: str):
        job = jobs.get(jid)
        if job is None:
            raise HTTPException(404, f"no job {jid}")
        return job

    return app


def _problems(doc: dict[str, Any]) -> list[dict[str, str]]:
    """The scenario's problems, as ``des run`` would print them (none: it is valid)."""
    from des.scenario import load_scenario

    try:
        load_scenario(doc)
    except ScenarioError as exc:
        return form.problems(exc)
    return []


def _stem(doc: dict[str, Any]) -> str:
    """A file name for the scenario: its name, with only safe characters."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", str(doc.get("name") or "scenario")) or "scenario"


async def _body(request: Request) -> bytes:
    """An upload's bytes, refused beyond :data:`MAX_UPLOAD`."""
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > MAX_UPLOAD:
            raise HTTPException(413, f"larger than {MAX_UPLOAD // 2**20} MiB")
    return bytes(data)
