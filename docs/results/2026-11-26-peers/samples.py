"""Reads a run's per-request samples: <run>/logs/<scenario>/<arm>/samples.jsonl
(a loadtest --out directory) or <run>/samples-<arm>.jsonl.gz (as kept here)."""
import glob, gzip, json, os

def arms(root):
    found = sorted(glob.glob(os.path.join(root, 'logs', '*', '*', 'samples.jsonl')))
    if found:
        return [(os.path.basename(os.path.dirname(f)), open(f)) for f in found]
    return [(os.path.basename(f)[len('samples-'):-len('.jsonl.gz')], gzip.open(f, 'rt'))
            for f in sorted(glob.glob(os.path.join(root, 'samples-*.jsonl.gz')))]

def rows(f):
    return [json.loads(l) for l in f if l.strip()]
