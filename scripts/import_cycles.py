"""The file-level import graph of src/ and its cycles (ARCHITECTURE.md: "no import cycle
between files"). Each .rs file's `crate::`, `super::` and `self::` paths (outside its
`#[cfg(test)] mod tests`) are resolved to the module file they name; strongly connected
components of more than one file are printed. Usage: python3 scripts/import_cycles.py [REPO]
Exits 1 when a cycle is found."""
import os, re, sys
root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
src = os.path.join(root, 'src')
mods = {}  # module path tuple -> file
for dp, _, fs in os.walk(src):
    for f in fs:
        if not f.endswith('.rs'): continue
        p = os.path.join(dp, f); rel = os.path.relpath(p, src)[:-3].split('/')
        if rel[-1] in ('mod', 'lib', 'main'): rel = rel[:-1]
        mods[tuple(rel)] = p
def modpath_of(p):
    rel = os.path.relpath(p, src)[:-3].split('/')
    if rel[-1] in ('mod','lib','main'): rel = rel[:-1]
    return tuple(rel)
def resolve(parts):
    for n in range(len(parts), 0, -1):
        if tuple(parts[:n]) in mods: return mods[tuple(parts[:n])]
    return None
ident = r'[A-Za-z_][A-Za-z0-9_]*'
edges = {p: set() for p in mods.values()}
for mp, p in mods.items():
    text = open(p).read()
    # strip test modules crudely: cut at '#[cfg(test)]\nmod tests'
    text = re.split(r'#\[cfg\(test\)\]\s*mod tests', text)[0]
    text = re.sub(r'//.*', '', text)
    is_dir_mod = os.path.basename(p) in ('mod.rs','lib.rs')
    here = list(mp)
    parent = here if is_dir_mod else here[:-1]
    # expand use-groups: crate::a::{b, c::d}
    def expand(prefix, body):
        out = []
        depth = 0; cur = ''
        for ch in body:
            if ch == '{': depth += 1
            if ch == '}': depth -= 1
            if ch == ',' and depth == 0: out.append(cur.strip()); cur = ''
            else: cur += ch
        if cur.strip(): out.append(cur.strip())
        res = []
        for o in out:
            m = re.match(r'(' + ident + r'(?:::' + ident + r')*)(?:::\{(.*)\})?', o, re.S)
            if not m: continue
            if m.group(2) is not None: res += expand(prefix + '::' + m.group(1), m.group(2))
            else: res.append(prefix + '::' + m.group(1))
        return res
    paths = []
    for m in re.finditer(r'\b(crate|super(?:::super)*|self)::\{([^;]*?)\};', text, re.S):
        paths += expand(m.group(1), m.group(2))
    for m in re.finditer(r'\b((?:crate|super(?:::super)*|self)(?:::' + ident + r')+)', text):
        paths.append(m.group(1))
    for path in paths:
        segs = path.split('::')
        if segs[0] == 'crate': base = []; segs = segs[1:]
        elif segs[0] == 'self': base = list(here); segs = segs[1:]
        else:
            base = list(here)
            while segs and segs[0] == 'super': base = base[:-1]; segs = segs[1:]
        tgt = resolve(base + segs)
        if tgt and tgt != p: edges[p].add(tgt)
# Tarjan
idx = {}; low = {}; st = []; on = set(); sccs = []; c = [0]
sys.setrecursionlimit(100000)
def sc(v):
    idx[v] = low[v] = c[0]; c[0] += 1; st.append(v); on.add(v)
    for w in edges[v]:
        if w not in idx: sc(w); low[v] = min(low[v], low[w])
        elif w in on: low[v] = min(low[v], idx[w])
    if low[v] == idx[v]:
        comp = []
        while True:
            w = st.pop(); on.discard(w); comp.append(w)
            if w == v: break
        if len(comp) > 1: sccs.append(comp)
for v in edges:
    if v not in idx: sc(v)
for comp in sccs:
    print('cycle:', ' '.join(sorted(os.path.relpath(x, src) for x in comp)))
    for a in comp:
        for b in edges[a]:
            if b in comp: print('   ', os.path.relpath(a, src), '->', os.path.relpath(b, src))
print(len(sccs), 'cycles')
sys.exit(1 if sccs else 0)
