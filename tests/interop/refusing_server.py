"""An MCP server over streamable HTTP that forgets every session at once, as a server
restarting between each request would: it answers ``initialize`` with a new session id,
then 404 to every request that names one (notifications are taken) (the protocol's answer to an unknown session).

    python refusing_server.py PORT LOG     # LOG gets one line per initialize

It shows that a client reopens a refused session once per call, not in a loop.
"""

from __future__ import annotations

import json
import sys
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
        if "id" not in body:  # a notification (notifications/initialized): taken
            self.send_response(202)
            self.send_header("content-length", "0")
            self.end_headers()
        elif self.headers.get("mcp-session-id"):
            self._json(
                404,
                {
                    "jsonrpc": "2.0",
                    "id": body.get("id"),
                    "error": {"code": -32001, "message": "Session not found"},
                },
            )
        elif body.get("method") == "initialize":
            with open(sys.argv[2], "a") as log:
                log.write("initialize\n")
            result = {
                "protocolVersion": body["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "refusing", "version": "1"},
            }
            self._json(
                200,
                {"jsonrpc": "2.0", "id": body["id"], "result": result},
                {"mcp-session-id": uuid.uuid4().hex},
            )
        else:  # the 2026 protocol's discovery: not spoken here
            self._json(
                400,
                {
                    "jsonrpc": "2.0",
                    "id": body.get("id"),
                    "error": {"code": -32000, "message": "Bad Request: not initialized"},
                },
            )

    def do_GET(self) -> None:
        self.send_response(405)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_DELETE(self) -> None:
        self.do_GET()

    def _json(self, status: int, payload: object, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
