#!/usr/bin/env python3
"""Logging reverse proxy for finding out what a peer router asks a worker
(stdlib only; diagnostics, not for load: it buffers whole responses, so
streams arrive in one piece).

Usage: logproxy.py LISTEN_PORT UPSTREAM_PORT LOGFILE
Listens on 127.0.0.1:LISTEN_PORT, forwards every request to
127.0.0.1:UPSTREAM_PORT (a sim-worker) and appends one JSON line per request
to LOGFILE: {"t", "method", "path", "headers", "body" (first 2000 chars)}.
Give the peer http://127.0.0.1:LISTEN_PORT as its worker URL.
"""
import http.server
import json
import sys
import time
import urllib.error
import urllib.request

LISTEN, UPSTREAM, LOG = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
HOP = {"content-length", "transfer-encoding", "connection", "date", "server"}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _forward(self):
        n = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(n) if n else b""
        with open(LOG, "a") as f:
            f.write(json.dumps({
                "t": time.time(), "method": self.command, "path": self.path,
                "headers": dict(self.headers),
                "body": body[:2000].decode("utf-8", "replace"),
            }) + "\n")
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
        req = urllib.request.Request(f"http://127.0.0.1:{UPSTREAM}{self.path}",
                                     data=body or None, method=self.command, headers=headers)
        try:
            r = urllib.request.urlopen(req, timeout=60)
            status, out_headers, data = r.status, r.getheaders(), r.read()
        except urllib.error.HTTPError as e:
            status, out_headers, data = e.code, list(e.headers.items()), e.read()
        self.send_response(status)
        for k, v in out_headers:
            if k.lower() not in HOP:
                self.send_header(k, v)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = _forward

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", LISTEN), Handler).serve_forever()
