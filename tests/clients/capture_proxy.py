"""A loopback HTTP proxy that keeps the JSON bodies a client POSTs and forwards every request to
the real server, streaming each response back as it comes (SSE keep-alives included, so a client's
idle timeout sees a long prefill as the server sends it): how a test gets a real agent's request,
exactly as the agent sent it, to replay with changes."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

HOP_HEADERS = ("host", "content-length", "connection", "transfer-encoding", "accept-encoding", "keep-alive")


class CaptureProxy:
    def __init__(self, upstream: str):
        self.upstream = upstream
        self.bodies: list[dict] = []
        self.replies: list[tuple[dict, bytes]] = []  # each JSON body POSTed, with the reply's bytes
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> "CaptureProxy":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _handler(self):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                self._forward(b"")

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                try:
                    parsed = json.loads(body)
                except ValueError:
                    return self._forward(body)
                proxy.bodies.append(parsed)
                proxy.replies.append((parsed, self._forward(body)))

            def _forward(self, body: bytes) -> bytes:
                """The upstream reply, its body ended by closing the connection (HTTP/1.0); its bytes."""
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
                with httpx.stream(self.command, proxy.upstream + self.path, content=body or None,
                                  headers=headers, timeout=httpx.Timeout(1800, connect=10)) as reply:
                    self.send_response(reply.status_code)
                    self.send_header("content-type", reply.headers.get("content-type", "application/json"))
                    self.end_headers()
                    chunks = []
                    for chunk in reply.iter_raw():
                        chunks.append(chunk)
                        self.wfile.write(chunk)
                        self.wfile.flush()
                self.close_connection = True
                return b"".join(chunks)

            def log_message(self, *args) -> None:
                pass

        return Handler
