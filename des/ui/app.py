"""The what-if page's web app: the page, its form's fields, jobs, downloads and the
results browser, as a FastAPI application over the same library calls as the CLI.

Every endpoint that reads or validates a scenario runs on FastAPI's thread pool (a plain
function, or :func:`run_in_threadpool`): nothing a user sends can hold up the event loop,
and simulations run in the job processes of :mod:`des.ui.jobs`. A problem with what was
sent comes back as the CLI's ``error: <path>: <problem>`` lines (``problems``), with status
200 for a scenario's problems (the page shows them next to their fields) and 4xx for a
malformed request.

Only the page ``des ui`` printed may use it (:mod:`des.ui.guard`: the loopback ``Host``,
the launch's token, the page's own ``Origin``), with bounded bodies, uploads, sweeps and
queue; a scenario it is sent may name only files it uploaded, or under its results folder
or working directory, and its problems name an upload by the file's own name.
"""

from __future__ import annotations

import re
import secrets
import tempfile
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool
from starlette.middleware.trustedhost import TrustedHostMiddleware

from des.errors import ScenarioError
from des.ui import browse, form, guard
from des.ui.jobs import Busy, Jobs
from des.ui.uploads import Refused, Uploads

STATIC = Path(__file__).parent / "static"
#: The largest JSON body (a scenario document, a job) or scenario file the page is sent, bytes.
MAX_BODY = 8 * 2**20
#: The most runs (loads x replications) a sweep of the page may make.
MAX_SWEEP_RUNS = 240


class JobRequest(BaseModel):
    """A run or a sweep of the scenario ``doc``; ``owner`` names the page (its tab) asking."""

    kind: str = Field(pattern="^(run|sweep)$")
    doc: dict[str, Any]
    owner: str = ""
    replace: bool = False
    fractions: list[float] = Field(default_factory=lambda: [0.2, 0.4, 0.6, 0.8, 0.9, 1.0, 1.1], min_length=1)
    replications: int = Field(3, ge=2, le=20)


def create_app(results: Path, max_running: int = 2, token: str | None = None) -> FastAPI:
    """The app, browsing ``results`` and keeping its jobs' and uploads' files in a
    temporary folder it removes when it stops; ``token`` is the secret its requests must
    carry (:mod:`des.ui.guard`; None: a new one, ``app.state.token``)."""
    scratch = Path(tempfile.mkdtemp(prefix="des-ui-"))
    uploads = Uploads(scratch / "uploads")
    jobs = Jobs(scratch / "jobs", max_running=max_running)
    roots = (uploads.folder, results, Path.cwd())

    def problems(doc: dict[str, Any]) -> list[dict[str, str]]:
        """The scenario's problems (none: it is valid), reading only files under ``roots``,
        naming uploads by their own names."""
        return [{k: uploads.shown(v) for k, v in p.items()} for p in _problems(doc, roots)]

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        yield
        jobs.shutdown()
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)

    app = FastAPI(title="des what-if", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.jobs = jobs
    app.state.uploads = uploads
    app.state.token = token or guard.new_token()
    app.add_middleware(guard.BodyLimit, limit=MAX_BODY, limits={"/api/upload": None})
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(guard.HOSTS))
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    api = APIRouter(prefix="/api", dependencies=[Depends(guard.authorised), Depends(guard.same_origin)])

    @app.get("/", response_model=None)
    def index(request: Request, token: str | None = None) -> Response:
        """The page, for a browser holding the token (its cookie), or opening the address
        with it, which stores it."""
        if token is not None and secrets.compare_digest(token.encode(), app.state.token.encode()):
            page = FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})
            guard.remember(page, request)
            return page
        if guard.has_token(request):
            return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})
        return HTMLResponse(f"<!doctype html><title>des what-if</title><p>{guard.NO_TOKEN}.</p>", status_code=403)

    @api.get("/form")
    def form_spec() -> dict[str, Any]:
        return {
            "doc": form.default_document(),
            "fields": form.fields(),
            "templates": form.TEMPLATES,
            "gpus": form.gpu_figures(),
            "carried": form.carried(),
        }

    @api.post("/check")
    def check(doc: Annotated[dict[str, Any], Body()]) -> dict[str, Any]:
        return {"problems": problems(doc)}

    @api.post("/jobs")
    def submit(req: JobRequest) -> dict[str, Any]:
        found = problems(req.doc)
        if found:
            return {"id": None, "problems": found}
        fractions = sorted(set(req.fractions))
        if req.kind == "sweep":
            try:
                _sweep_bounds(req.fractions, req.replications)
            except ScenarioError as exc:
                return {"id": None, "problems": form.problems(exc)}
        args = {"doc": req.doc, "fractions": fractions, "replications": req.replications}
        try:
            job = jobs.submit(req.kind, args, owner=req.owner, replace=req.replace)
        except Busy as exc:
            return {"id": None, "problems": form.problems(ScenarioError(("jobs", str(exc))))}
        return {"id": job.id, "problems": []}

    @api.get("/jobs/{jid}")
    def status(jid: str) -> dict[str, Any]:
        view = _job(jid).view()
        view["problems"] = [{k: uploads.shown(v) for k, v in p.items()} for p in view["problems"]]
        return view

    @api.post("/jobs/{jid}/cancel")
    def cancel(jid: str) -> dict[str, Any]:
        job = jobs.cancel(jid)
        if job is None:
            raise HTTPException(404, f"no job {jid}")
        return job.view()

    @api.get("/jobs/{jid}/figure.{fmt}")
    def job_figure(jid: str, fmt: str) -> FileResponse:
        job = _job(jid)
        path = job.folder / f"sweep.{fmt}"
        if fmt not in ("png", "svg") or job.state != "done" or not path.is_file():
            raise HTTPException(404, "no such figure")
        media = browse.SHOWN[f".{fmt}"]
        return FileResponse(path, media_type=media, filename=f"{_stem(job.args['doc'])}-sweep.{fmt}")

    @api.post("/scenario.yaml")
    def download(doc: Annotated[dict[str, Any], Body()]) -> Response:
        name = f"{_stem(doc)}.yaml"
        return Response(
            form.document_yaml(doc),
            media_type="application/x-yaml",
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )

    @api.post("/parse")
    async def parse(request: Request, name: Annotated[str, Query()] = "scenario.yaml") -> JSONResponse:
        data = await request.body()  # bounded by MAX_BODY (guard.BodyLimit)
        try:  # parsing is work: on the thread pool, not the event loop
            doc = await run_in_threadpool(form.parse_document, data, name)
        except ScenarioError as exc:
            return JSONResponse({"doc": None, "problems": form.problems(exc)})
        return JSONResponse({"doc": doc, "problems": []})

    @api.post("/upload")
    async def upload(request: Request, name: Annotated[str, Query()]) -> dict[str, Any]:
        length = request.headers.get("content-length")
        declared = int(length) if length is not None and length.isdigit() else None
        try:
            path = await uploads.save(name, request.stream(), declared)
        except Refused as exc:
            raise HTTPException(exc.status, str(exc)) from None
        return {"path": str(path)}

    @api.get("/results")
    def results_list() -> dict[str, Any]:
        return {"root": str(results), "entries": browse.entries(results)}

    @api.get("/results/view")
    def results_view(path: str) -> dict[str, Any]:
        try:
            return browse.view(results, path)
        except browse.NotFound:
            raise HTTPException(404, f"no result folder {path!r} under {results}") from None

    @api.get("/results/file")
    def results_file(path: str) -> FileResponse:
        try:
            file, media = browse.file(results, path)
        except browse.NotFound:
            raise HTTPException(404, f"no file {path!r} under {results}") from None
        return FileResponse(file, media_type=media, filename=file.name)

    @api.get("/results/figure.{fmt}")
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

    app.include_router(api)
    return app


def _problems(doc: dict[str, Any], roots: tuple[Path, ...]) -> list[dict[str, str]]:
    """The scenario's problems, as ``des run`` would print them (none: it is valid), its
    files read only under ``roots``; a file field the form left empty asks for its file."""
    from des.scenario import load_scenario

    empty = form.empty_files(doc)
    if empty:
        return form.problems(ScenarioError(empty))
    try:
        load_scenario(doc, file_roots=roots)
    except ScenarioError as exc:
        return form.problems(exc)
    return []


def _sweep_bounds(fractions: list[float], replications: int) -> None:
    """:class:`ScenarioError` naming ``fractions`` for a load out of (0, 3], or a grid of
    more than :data:`MAX_SWEEP_RUNS` runs."""
    bad = [f for f in fractions if not 0 < f <= 3]
    if bad:
        raise ScenarioError(("fractions", f"each must be > 0 and <= 3 (got {bad[0]:g})"))
    runs = len(set(fractions)) * replications
    if runs > MAX_SWEEP_RUNS:
        raise ScenarioError((
            "fractions",
            f"{len(set(fractions)):,} loads x {replications} replications is {runs:,} runs; the page sweeps "
            f"at most {MAX_SWEEP_RUNS} (des sweep runs more)",
        ))  # fmt: skip


def _stem(doc: dict[str, Any]) -> str:
    """A file name for the scenario: its name, with only safe characters."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", str(doc.get("name") or "scenario")) or "scenario"
