"""The inventory service of the stock-check task: item ids, then one item per request."""

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ITEMS = {
    "a17": {"name": "hex bolt", "stock": 3},
    "b02": {"name": "washer", "stock": 40},
    "c33": {"name": "wing nut", "stock": 0},
    "d48": {"name": "rivet", "stock": 5},
    "e51": {"name": "anchor", "stock": 4},
    "f60": {"name": "spring", "stock": 12},
}


class Handler(BaseHTTPRequestHandler):
    def _send(self, code: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        parts = [p for p in self.path.split("?")[0].split("/") if p]
        if parts == ["health"]:
            self._send(200, {"ok": True})
        elif parts == ["items"]:
            self._send(200, sorted(ITEMS))
        elif len(parts) == 2 and parts[0] == "items" and parts[1] in ITEMS:
            self._send(200, {"id": parts[1], **ITEMS[parts[1]]})
        else:
            self._send(404, {"error": f"no such path: {self.path}"})

    def log_message(self, *args: object) -> None:
        pass


ThreadingHTTPServer(("0.0.0.0", 8080), Handler).serve_forever()
