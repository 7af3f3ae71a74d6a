"""A simulated LMCache worker (issue 31): it speaks the LMCache controller's
own ZMQ protocol, with lmcache's own message classes, and admits or evicts
the chunks of token ids a test asks for over a small HTTP API.

It registers like LMCache's worker (lmcache/v1/cache_controller/worker.py):
a REQ socket to the controller's "reply" port carries RegisterMsg, a REQ
socket to its "heartbeat" port carries HeartbeatMsg every second, and a
PUSH socket to its "pull" port carries BatchedKVOperationMsg (admit/evict
of integer chunk keys at a location such as LocalCPUBackend).

The chunk keys are those the controller's own lookup computes: the
controller's ChunkedTokenDatabase with its defaults (256-token chunks, the
last one partial, each key Python's hash of (previous key, chunk, ()),
starting from 0), imported from lmcache itself, so both sides agree by
construction.

HTTP (127.0.0.1 only):
  POST /admit {"tokens": [...], "location": "LocalCPUBackend"} -> {"keys": [...]}
  POST /evict {"tokens": [...], "location": "LocalCPUBackend"} -> {"keys": [...]}
  GET  /health -> {"instance_id": ..., "registered": true}

Usage: sim_lmcache_worker.py --instance-id ID --controller-host 127.0.0.1
       --pull-port A --reply-port B --heartbeat-port C --http-port P
Prints "lmcache-sim ready" once registered and serving.
"""

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import msgspec
import zmq

from lmcache.v1.cache_controller.message import (
    BatchedKVOperationMsg,
    HeartbeatMsg,
    KVOpEvent,
    OpType,
    RegisterMsg,
)
from lmcache.v1.token_database import ChunkedTokenDatabase


class Worker:
    def __init__(self, args):
        self.args = args
        self.ctx = zmq.Context()
        self.lock = threading.Lock()
        self.seq = {}
        self.db = ChunkedTokenDatabase()
        host = args.controller_host
        self.push = self.ctx.socket(zmq.PUSH)
        self.push.connect(f"tcp://{host}:{args.pull_port}")
        self.reply_url = f"tcp://{host}:{args.reply_port}"
        self.heartbeat_url = f"tcp://{host}:{args.heartbeat_port}"

    def _request(self, url, msg):
        sock = self.ctx.socket(zmq.REQ)
        sock.setsockopt(zmq.RCVTIMEO, 5000)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(url)
        try:
            sock.send(msgspec.msgpack.encode(msg))
            return sock.recv()
        finally:
            sock.close()

    def _about_me(self, cls):
        """A RegisterMsg or HeartbeatMsg: the same fields name this worker."""
        return cls(
            instance_id=self.args.instance_id,
            worker_id=0,
            ip="127.0.0.1",
            port=self.args.http_port,
            peer_init_url=None,
        )

    def register(self):
        self._request(self.reply_url, self._about_me(RegisterMsg))

    def heartbeat_loop(self):
        while True:
            time.sleep(1.0)
            try:
                self._request(self.heartbeat_url, self._about_me(HeartbeatMsg))
            except zmq.ZMQError as e:
                print(f"heartbeat failed: {e}", file=sys.stderr, flush=True)

    def keys(self, tokens):
        return [key for _, _, key in self.db.process_tokens(tokens, make_key=False)]

    def operate(self, op, tokens, location):
        keys = self.keys(tokens)
        with self.lock:
            seq = self.seq.get(location, -1)
            ops = []
            for key in keys:
                seq += 1
                ops.append(KVOpEvent(op_type=op, key=key, seq_num=seq))
            self.seq[location] = seq
            msg = BatchedKVOperationMsg(
                instance_id=self.args.instance_id,
                worker_id=0,
                location=location,
                operations=ops,
            )
            self.push.send(msgspec.msgpack.encode(msg))
        return keys


def handler(worker):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _answer(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/health":
                self._answer(200, {"instance_id": worker.args.instance_id, "registered": True})
            else:
                self._answer(404, {"error": "not found"})

        def do_POST(self):
            ops = {"/admit": OpType.ADMIT, "/evict": OpType.EVICT}
            if self.path not in ops:
                self._answer(404, {"error": "not found"})
                return
            try:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length))
                tokens = [int(t) for t in body["tokens"]]
                location = str(body.get("location", "LocalCPUBackend"))
            except (ValueError, KeyError, TypeError) as e:
                self._answer(400, {"error": str(e)})
                return
            keys = worker.operate(ops[self.path], tokens, location)
            self._answer(200, {"keys": keys})

    return Handler


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--instance-id", required=True)
    p.add_argument("--controller-host", default="127.0.0.1")
    p.add_argument("--pull-port", type=int, required=True)
    p.add_argument("--reply-port", type=int, required=True)
    p.add_argument("--heartbeat-port", type=int, required=True)
    p.add_argument("--http-port", type=int, required=True)
    args = p.parse_args()
    worker = Worker(args)
    # The controller may still be starting: retry the registration.
    for attempt in range(60):
        try:
            worker.register()
            break
        except zmq.ZMQError as e:
            print(f"register attempt {attempt}: {e}", file=sys.stderr, flush=True)
            time.sleep(0.5)
    else:
        sys.exit("could not register with the controller")
    threading.Thread(target=worker.heartbeat_loop, daemon=True).start()
    server = ThreadingHTTPServer(("127.0.0.1", args.http_port), handler(worker))
    print("lmcache-sim ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
