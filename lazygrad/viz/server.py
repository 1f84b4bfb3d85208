"""The VIZ web page, served by the standard library on localhost: no JavaScript or fonts come from the network.

Routes: `/` the page (page.html, one file of HTML, CSS and JS), `/data.json` the record without its node table
(kernels, passes, trace), `/graph/<id>` the layout of the graph under node <id> (computed here, see layout.py).
`serve(data)` runs the server in a daemon thread and returns it (tests, notebooks); `.stop()` ends it.
"""

from __future__ import annotations

import functools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from lazygrad.helpers import LIBRARY_THREAD, getenv
from lazygrad.viz.layout import layout

PAGE = Path(__file__).with_name("page.html")


class VizServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, data: dict[str, Any], port: int = 0):
        self.data = data
        self.summary = json.dumps({k: v for k, v in data.items() if k != "nodes"}).encode()
        self.layout = functools.lru_cache(maxsize=256)(self._layout)
        super().__init__(("127.0.0.1", port), _Handler)
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/"

    def _layout(self, root: int) -> bytes:
        return json.dumps(layout(self.data["nodes"], root)).encode()

    def start(self) -> VizServer:
        self.thread = threading.Thread(target=self.serve_forever, name=f"{LIBRARY_THREAD} viz", daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        if self.thread is not None:
            self.thread.join()


class _Handler(BaseHTTPRequestHandler):
    server: VizServer

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path in ("/", "/index.html"):
            self._send(PAGE.read_bytes(), "text/html; charset=utf-8")
        elif path == "/data.json":
            self._send(self.server.summary, "application/json")
        elif path.startswith("/graph/") and path[7:].isdigit() and int(path[7:]) < len(self.server.data["nodes"]):
            self._send(self.server.layout(int(path[7:])), "application/json")
        else:
            self.send_error(404, f"no such page: {path}")

    def _send(self, body: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # the page's requests are not the user's business
        pass


def serve(data: dict[str, Any], port: int = 0) -> VizServer:
    """Serve a VIZ record in a background thread (port 0: any free port); the server's `.url` is the page."""
    return VizServer(data, port).start()


def serve_until_interrupted(data: dict[str, Any]) -> None:
    """Serve on $VIZ_PORT (8000; a free port if that one is taken) until Ctrl-C."""
    try:
        server = serve(data, getenv("VIZ_PORT", 8000))
    except OSError:
        server = serve(data, 0)
    try:  # (the announcement inside: a Ctrl-C right after it still stops the server cleanly)
        print(f"VIZ: serving {server.url} (Ctrl-C to stop)", flush=True)
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
