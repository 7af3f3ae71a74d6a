"""The LMCache controller's POST /lookup latency by prompt length (issue 31),
held and not held, 40 lookups each over one kept-alive connection.

Needs a controller on 127.0.0.1:18900 and a simulated LMCache worker
(sim_lmcache_worker.py) on 127.0.0.1:18910; the commands are in
docs/results/2026-11-28-lmcache-lookup/journal.md.
"""
import http.client, json, time, statistics
def post(conn, path, body):
    data = json.dumps(body)
    conn.request("POST", path, data, {"content-type": "application/json"})
    r = conn.getresponse(); return json.loads(r.read())
sim = http.client.HTTPConnection("127.0.0.1", 18910)
ctl = http.client.HTTPConnection("127.0.0.1", 18900)
print("tokens  held  median_ms  p90_ms  max_ms")
for n in [256, 1024, 4096, 16384, 65536]:
    toks = list(range(7, 7 + n))
    post(sim, "/admit", {"tokens": toks, "location": "LocalCPUBackend"})
    time.sleep(0.3)
    for held in (True, False):
        ask = toks if held else [t + 1 for t in toks]
        ts = []
        for _ in range(40):
            t0 = time.perf_counter(); r = post(ctl, "/lookup", {"tokens": ask}); ts.append((time.perf_counter() - t0) * 1000)
        ts.sort()
        print(f"{n:6d}  {str(held):5s}  {statistics.median(ts):8.2f}  {ts[int(len(ts)*0.9)]:6.2f}  {ts[-1]:6.2f}  {r['layout_info']}")
