"""split.py RUN: per arm, the share of requests that hit (cached tokens > half
the prompt) and the median TTFT of the hits and of the misses (nearest rank,
successful requests)."""
import sys
from samples import arms, rows

def pct(v, p):
    if not v:
        return float('nan')
    v = sorted(v)
    return v[max(0, min(len(v) - 1, int(round(p / 100 * len(v) + 0.5)) - 1))]

for name, f in arms(sys.argv[1]):
    rs = rows(f)
    ok = [r for r in rs if not r['error'] and r.get('ttft_ms') is not None]
    hit = [r['ttft_ms'] for r in ok if r['cached_tokens'] * 2 > r['prompt_tokens']]
    miss = [r['ttft_ms'] for r in ok if r['cached_tokens'] * 2 <= r['prompt_tokens']]
    print(f"{name}: requests {len(rs)} ok {len(ok)}; hits {len(hit)} ({100 * len(hit) / max(1, len(ok)):.1f}%), "
          f"TTFT p50 of hits {pct(hit, 50):.1f} ms, of misses {pct(miss, 50):.1f} ms")
