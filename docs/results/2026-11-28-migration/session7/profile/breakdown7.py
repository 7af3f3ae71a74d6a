import sys,re,collections
# Samples of the relay's migration code (any frame in proxy::migrate),
# split by what the innermost such frame calls into.
def parts(stack):
    for i,s in enumerate(stack):
        if 'prefix_router::proxy::migrate' in s or 'forward::Guarded' in s:
            inner=' '.join(stack[:i+1])
            if 'forward::Guarded' in s: return 'off path: forward::Guarded'
            if re.search(r'Timeout|time::|Timer|Sleep',inner): return 'timer (stall timeout per read)'
            if re.search(r'Notified|notify|watch',inner): return 'drain watch (changed() per read)'
            if 'chunk::' in inner or 'serde' in inner or 'View' in inner: return 'serde: the chunk View (and Head)'
            if 'ids::Walk::object' in s and re.search(r'grow_one|malloc|RawVec',inner): return 'ids: the cut list (a Vec per event)'
            if 'ids::' in s or 'walk::' in s or 'parse_ids' in inner or 'read_token_ids' in inner: return 'ids scan / parse'
            if 'sse::' in s: return 'sse Events (copy, boundary, split)'
            if re.search(r'grow_one|malloc|free|RawVec',inner): return 'allocation (other)'
            if 'on_event' in s: return 'Answer::on_event (own code)'
            return 'other relay code (Relay::read/new, prepare, drops)'
    return None
def run(f):
    c=collections.Counter(); n=0; stack=[]
    def flush():
        nonlocal n
        if not stack: return
        n+=1
        p=parts(stack)
        if p: c[p]+=1
    for line in open(f):
        if not line.strip(): flush(); stack.clear(); continue
        q=line.split(None,1)
        if len(q)==2 and re.match(r'^[0-9a-f]+$',q[0]): stack.append(q[1].strip())
    flush()
    return c,n
args=sys.argv[1:]
res=[run(a.split(':')[0]) for a in args]
reqs=[int(a.split(':')[1]) for a in args]
hz=int(__import__("os").environ.get("HZ","4999"))
keys=sorted(set(k for c,_ in res for k in c), key=lambda k:-sum(c[k] for c,_ in res))
print('| part | '+' | '.join(a.split(':')[0] for a in args)+' |')
print('|---|'+'---:|'*len(args))
for k in keys:
    print(f'| {k} | '+' | '.join(f"{c[k]} ({1000*c[k]/hz/r:.3f} ms/req)" for (c,_),r in zip(res,reqs))+' |')
print('| all samples of the router | '+' | '.join(f"{n} ({1000*n/hz/r:.2f} ms/req)" for (c,n),r in zip(res,reqs))+' |')
