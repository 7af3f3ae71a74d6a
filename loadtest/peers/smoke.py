#!/usr/bin/env python3
"""Smoke test of router replicas in front of sim-workers (stdlib only).

Usage: smoke.py PORT[,PORT...]   (router replicas on 127.0.0.1)

1. Through each replica: /v1/completions with a text prompt and with token
   ids, /v1/chat/completions, each plain and streamed, each sent twice; prints
   the status, the sim's headers (x-sim-worker, x-sim-cached-tokens) and the
   worker in the body's id (cmpl-<worker>-<n>), to check header passthrough.
2. Sequential distinct prompts, each sent through replica i then replica
   i+1: which sim answered, and whether the repeat landed on the same sim.
3. Concurrent waves (16 distinct prompts at once, then the same 16 again
   through the next replica): spread over sims and repeat stickiness.
"""
import collections
import http.client
import json
import random
import sys
import threading

MODEL = "qwen3"


def post(port, path, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", path, json.dumps(body), {"content-type": "application/json"})
    r = c.getresponse()
    data = r.read().decode("utf-8", "replace")
    return r.status, {k.lower(): v for k, v in r.getheaders()}, data


def body_worker(status, data, stream):
    """The worker named in the response body's id (cmpl-<worker>-<n>)."""
    if status != 200:
        return None
    try:
        if stream:
            first = next(l for l in data.splitlines() if l.startswith("data: {"))
            ident = json.loads(first[6:])["id"]
        else:
            ident = json.loads(data)["id"]
    except (StopIteration, ValueError, KeyError):
        return None
    return ident.split("-", 1)[1].rsplit("-", 1)[0]


def matrix(port):
    long = "The quick brown fox jumps over the lazy dog. " * 40
    ids = list(range(1000, 1400))
    cases = [
        ("completions text", "/v1/completions", {"prompt": "A" + long}),
        ("completions text stream", "/v1/completions", {"prompt": "B" + long, "stream": True}),
        ("completions token ids", "/v1/completions", {"prompt": ids}),
        ("completions ids stream", "/v1/completions", {"prompt": [7] + ids, "stream": True}),
        ("chat", "/v1/chat/completions",
         {"messages": [{"role": "system", "content": "C" + long}, {"role": "user", "content": "hi"}]}),
        ("chat stream", "/v1/chat/completions",
         {"messages": [{"role": "system", "content": "D" + long}, {"role": "user", "content": "hi"}],
          "stream": True}),
    ]
    ok = True
    for label, path, extra in cases:
        for attempt in range(2):
            body = {"model": MODEL, "max_tokens": 4, **extra}
            status, h, data = post(port, path, body)
            stream = bool(extra.get("stream"))
            done = (not stream) or data.rstrip().endswith("data: [DONE]")
            note = "" if status == 200 else " " + data[:120].replace("\n", " ")
            print(f"  {label:24s} #{attempt} {status} ctype={h.get('content-type')} "
                  f"x-sim-worker={h.get('x-sim-worker')} x-sim-cached-tokens={h.get('x-sim-cached-tokens')} "
                  f"body-worker={body_worker(status, data, stream)} done={done}{note}")
            ok &= status == 200
    return ok


def sequential(ports, n=6):
    rnd = random.Random(1)
    same = 0
    for i in range(n):
        words = " ".join(rnd.choice(["alpha", "beta", "gamma", "delta", "omega"]) for _ in range(200))
        body = {"model": MODEL, "prompt": f"doc {i}: {words}", "max_tokens": 2}
        a, b = ports[i % len(ports)], ports[(i + 1) % len(ports)]
        _, ha, _ = post(a, "/v1/completions", body)
        _, hb, _ = post(b, "/v1/completions", body)
        same += ha.get("x-sim-worker") == hb.get("x-sim-worker")
        print(f"  prompt {i}: via :{a} -> {ha.get('x-sim-worker')}, repeat via :{b} -> "
              f"{hb.get('x-sim-worker')} (cached {hb.get('x-sim-cached-tokens')})")
    print(f"  repeat on the same sim: {same}/{n}")


def concurrent(ports, n=16, max_tokens=200):
    rnd = random.Random(7)
    prompts = [f"conv {i} " + " ".join(rnd.choice(["red", "green", "blue", "cyan", "teal"]) for _ in range(300))
               for i in range(n)]

    def wave(shift):
        out = [None] * n

        def one(i):
            s, h, _ = post(ports[(i + shift) % len(ports)], "/v1/completions",
                           {"model": MODEL, "prompt": prompts[i], "max_tokens": max_tokens})
            out[i] = (s, h.get("x-sim-worker"), int(h.get("x-sim-cached-tokens") or 0))

        ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return out

    a, b = wave(0), wave(1)
    for name, w in (("wave 1", a), ("wave 2 (repeat, next replica)", b)):
        print(f"  {name}: sims {dict(collections.Counter(x[1] for x in w))} "
              f"statuses {dict(collections.Counter(x[0] for x in w))}")
    same = sum(1 for x, y in zip(a, b) if x[1] == y[1])
    hits = sum(1 for y in b if y[2] > 0)
    print(f"  repeat on the same sim: {same}/{n}; repeat with cached tokens: {hits}/{n}")


def main():
    ports = [int(p) for p in sys.argv[1].split(",")]
    ok = True
    for p in ports:
        print(f"== request matrix through :{p}")
        ok &= matrix(p)
    print("== sequential distinct prompts, repeat through the next replica")
    sequential(ports)
    print("== concurrent waves")
    concurrent(ports)
    print("all matrix requests 200" if ok else "some matrix requests failed")


if __name__ == "__main__":
    main()
