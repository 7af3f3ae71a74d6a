"""window.py RUN EVENT_S: per arm, token-weighted hit rate and failures of the
requests sent in windows around the event (seconds from the run's start)."""
import sys
from samples import arms, rows

event = float(sys.argv[2])
spans = [(-10, 0), (0, 5), (5, 10), (10, 20), (20, 45)]
for name, f in arms(sys.argv[1]):
    rs = rows(f)
    out = []
    for a, b in spans:
        w = [r for r in rs if event + a <= r['start_s'] < event + b]
        ok = [r for r in w if not r['error']]
        pt = sum(r['prompt_tokens'] or 0 for r in ok)
        ct = sum(r['cached_tokens'] or 0 for r in ok)
        out.append(f"[{a:+d},{b:+d}) s: {100 * ct / max(1, pt):.1f}% ({len(w) - len(ok)} failed)")
    print(name + ": " + "; ".join(out))
