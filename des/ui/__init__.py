"""``des ui``: the what-if page, a local web app over the library (DESIGN.md: a
presentation layer holding no simulation logic of its own).

:func:`serve` binds 127.0.0.1 (or ``host``), prints the page's address on one line (with
the launch's secret token: ``http://127.0.0.1:PORT/?token=...``; :mod:`des.ui.guard`),
opens it in a browser unless told not to, and serves until interrupted. The page
(:mod:`des.ui.static`) is our own HTML and JavaScript, with no script from elsewhere, so
it works offline; its figures are drawn on the server by the code that draws the report's
(:mod:`des.figures.load`), so a downloaded PNG or SVG is what the report would show.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from des.errors import ScenarioError

if TYPE_CHECKING:
    import socket

#: The port ``des ui`` listens on unless told otherwise.
DEFAULT_PORT = 8050


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (0: any free port); a port in use names ``--port``."""
    import socket

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ScenarioError(
            ("--port", f"cannot listen on {host}:{port}: {exc.strerror or exc} (try --port 0)")
        ) from None
    sock.listen(128)
    return sock


def serve(port: int, results: Path, open_browser: bool = True, host: str = "127.0.0.1") -> None:
    """Serve the page until Ctrl-C (or SIGTERM), then end every job and return."""
    import uvicorn

    from des.ui.app import create_app

    sock = bind(host, port)
    app = create_app(results)
    url = f"http://{host}:{sock.getsockname()[1]}/?token={app.state.token}"
    app.state.jobs.warm()
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    print(url, flush=True)
    if open_browser:
        import webbrowser

        webbrowser.open(url)
    server.run(sockets=[sock])
