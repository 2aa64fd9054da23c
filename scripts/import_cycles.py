"""The file-level import graph of src/: its cycles and its folder order (ARCHITECTURE.md,
"Code map"). Usage: python3 scripts/import_cycles.py [REPO] [--graph]

A file imports another when it names an item of the other's module: a `crate::`, `super::` or
`self::` path, a `use` of one, or a name such a `use` bound (`use super::x86;` then
`x86::floats::run`) used as the head of a path. Test code is left out: `#[cfg(test)]` modules,
inline or in their own file. Inline modules (`mod simd { … }`) resolve `super::` from where they
sit. Two checks, each printing what breaks it:

1. no cycle between files (a strongly connected component of more than one file);
2. the folder order: every file belongs to the longest unit of LAYERS that holds it, and an
   import goes to its own unit, to a unit of a lower layer, or along one of the EXCEPTIONS.

Exits 1 when either check fails; --graph prints the unit-to-unit imports and exits 0."""
import os, re, sys

# Bottom first. A unit is a module path under src/ ("" is lib.rs); a file belongs to the longest
# unit holding it. ARCHITECTURE.md's "Code map" states the same order.
LAYERS = [
    ['knobs', 'names', 'output', 'npy', 'nprand', 'stats', 'energy', 'record', 'threads', 'csv', 'figure', 'shown'],  # leaves
    ['interrupt', 'meter'],
    ['backend'],                         # the one contract scenarios and backends share
    ['progress', 'agency', 'scripted', 'provenance'],
    ['inference::files'],                # local inference, its rooms bottom first
    ['inference::text'],
    ['inference::kernels'],
    ['inference::engine'],
    ['inference::models'],
    ['inference'],                       # inference/mod.rs, llm_backend.rs
    ['served'],
    ['llm'],
    ['energy_society'],
    ['race'],
    ['report'],
    ['sweep'],
    ['cli'],
    [''],
]
# Imports against the order, each declared with its reason: (importing module, imported unit).
EXCEPTIONS = {
    ('inference::files::manifest', 'inference::models'):
        'a manifest marked implemented is checked against models::ARCHITECTURES',
    ('inference::kernels::cuda', 'inference::models'):
        'the CUDA host side takes its shapes (Dims) from the model files it accelerates',
}

ident = r'[A-Za-z_][A-Za-z0-9_]*'
root = next((a for a in sys.argv[1:] if not a.startswith('--')),
            os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
src = os.path.join(root, 'src')


def strip(text):
    """Comments gone, string and char literals emptied, lengths kept roughly (braces safe)."""
    out = []; i = 0; n = len(text)
    while i < n:
        c = text[i]
        if text.startswith('//', i):
            j = text.find('\n', i); i = n if j < 0 else j
        elif text.startswith('/*', i):
            depth = 0
            while i < n:
                if text.startswith('/*', i): depth += 1; i += 2
                elif text.startswith('*/', i):
                    depth -= 1; i += 2
                    if depth == 0: break
                else: i += 1
            out.append(' ')
        elif (m := re.match(r'b?r(#*)"', text[i:i + 10])) and (i == 0 or not re.match(r'\w', text[i - 1])):
            end = '"' + m.group(1)
            j = text.find(end, i + len(m.group(0))); i = n if j < 0 else j + len(end)
            out.append('""')
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == '\\' else 1
            i = j + 1; out.append('""')
        elif c == "'" and (m := re.match(r"'(?:\\(?:u\{[0-9a-fA-F]+\}|x..|.)|[^\\'])'", text[i:i + 12])):
            i += len(m.group(0)); out.append("' '")
        else:
            out.append(c); i += 1
    return ''.join(out)


def block_end(text, i):
    """Index after the brace that closes the one at text[i]."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == '{': depth += 1
        elif text[j] == '}':
            depth -= 1
            if depth == 0: return j + 1
    return len(text)


# Module path -> file; files declared under #[cfg(test)] are left out.
mods = {}
for dp, _, fs in os.walk(src):
    for f in fs:
        if not f.endswith('.rs'): continue
        p = os.path.join(dp, f); rel = os.path.relpath(p, src)[:-3].split('/')
        if rel == ['main']: continue  # the binary's root: a crate of its own, importing the library
        if rel[-1] in ('mod', 'lib'): rel = rel[:-1]
        mods[tuple(rel)] = p
texts = {p: strip(open(p).read()) for p in mods.values()}
macros = {}
# `#[macro_export]` macros sit at the crate's root: `crate::outln!` names the file defining it.
for p in list(mods.values()):
    for m in re.finditer(r'#\[macro_export\]\s*macro_rules!\s*(' + ident + ')', texts[p]):
        macros[(m.group(1),)] = p
cfg_test = r'#\[cfg\((?:test|all\(test[^\]]*)\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(' + ident + r')\s*'
test_files = set()
for mp, p in mods.items():
    here = list(mp) if os.path.basename(p) in ('mod.rs', 'lib.rs', 'main.rs') or not mp else list(mp)
    for m in re.finditer(cfg_test + ';', texts[p]):
        child = tuple(here + [m.group(1)])
        if child in mods: test_files.add(mods[child])
# A test file's own children are test code too.
for mp, p in list(mods.items()):
    if any(mods.get(mp[:k]) in test_files for k in range(1, len(mp))): test_files.add(p)
files = {p: mp for mp, p in mods.items() if p not in test_files}


def resolve(parts):
    if tuple(parts[:1]) in macros: return macros[tuple(parts[:1])]
    for k in range(len(parts), -1, -1):
        if tuple(parts[:k]) in mods and mods[tuple(parts[:k])] in files: return mods[tuple(parts[:k])]
    return None


def split_top(body):
    out = []; depth = 0; cur = ''
    for ch in body:
        if ch == '{': depth += 1
        if ch == '}': depth -= 1
        if ch == ',' and depth == 0: out.append(cur.strip()); cur = ''
        else: cur += ch
    if cur.strip(): out.append(cur.strip())
    return out


def use_leaves(prefix, body):
    """(path segments, bound name) for each leaf of a use tree."""
    res = []
    for o in split_top(body):
        o = re.sub(r'\s+', '', o.replace(' as ', '@as@'))
        m = re.match(r'((?:' + ident + r'::)*)\{(.*)\}$', o, re.S)
        if m:
            res += use_leaves(prefix + [s for s in m.group(1).split('::') if s], m.group(2))
            continue
        o, _, alias = o.partition('@as@')
        segs = [s for s in o.split('::') if s]
        if not segs: continue
        if segs[-1] == 'self': segs = segs[:-1]
        full = prefix + segs
        if full: res.append((full, alias or (full[-1] if full[-1] != '*' else None)))
    return res


def below(t, here):
    """A module's own descendants: a folder's mod.rs uses its children freely, not counted."""
    mt = files[t]
    return len(mt) > len(here) and list(mt[:len(here)]) == list(here)


def scan(text, here, p, edges):
    """Edges of the code in `text`, sitting in module path `here` (inline modules recursed)."""
    # inline modules: cut out, test ones dropped, others scanned in their own path
    pieces = []; last = 0
    for m in re.finditer(r'(#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(' + ident + r')\s*\{', text):
        if m.start() < last: continue
        end = block_end(text, m.end() - 1)
        pieces.append(text[last:m.start()])
        if not re.search(r'cfg\((?:test|all\(test)', m.group(0)):
            scan(text[m.end():end - 1], here + [m.group(2)], p, edges)
        last = end
    text = ''.join(pieces) + text[last:]

    def absolute(segs, bound):
        if not segs: return None
        h = segs[0]
        if h == 'crate': return segs[1:]
        if h == 'self': return here + segs[1:]
        if h == 'super':
            base = list(here)
            while segs and segs[0] == 'super': base = base[:-1]; segs = segs[1:]
            return base + segs
        if h in bound: return bound[h] + segs[1:]
        return None

    bound = {}
    uses = []
    for m in re.finditer(r'\buse\s+([^;]*);', text):
        uses += use_leaves([], m.group(1))
    # a `use` may name one bound by another; two passes settle the usual chains
    for _ in range(2):
        for segs, name in uses:
            a = absolute(segs, bound)
            if a is not None and name and name != '*': bound.setdefault(name, a)
    for segs, _ in uses:
        a = absolute(segs, bound)
        if a is not None:
            t = resolve([s for s in a if s != '*'])
            if t and t != p and not below(t, here): edges[p].add(t)
    for m in re.finditer(r'(?<![\w:])(' + ident + r'(?:\s*::\s*' + ident + r')+)', text):
        segs = re.sub(r'\s+', '', m.group(1)).split('::')
        if segs[0] not in ('crate', 'self', 'super') and segs[0] not in bound:
            continue
        a = absolute(segs, bound)
        if a is not None:
            t = resolve(a)
            if t and t != p and not below(t, here): edges[p].add(t)


edges = {p: set() for p in files}
for p, mp in files.items():
    scan(texts[p], list(mp), p, edges)

# Check 1: cycles (Tarjan)
idx = {}; low = {}; st = []; on = set(); sccs = []; c = [0]
sys.setrecursionlimit(100000)
def sc(v):
    idx[v] = low[v] = c[0]; c[0] += 1; st.append(v); on.add(v)
    for w in sorted(edges[v]):
        if w not in idx: sc(w); low[v] = min(low[v], low[w])
        elif w in on: low[v] = min(low[v], idx[w])
    if low[v] == idx[v]:
        comp = []
        while True:
            w = st.pop(); on.discard(w); comp.append(w)
            if w == v: break
        if len(comp) > 1: sccs.append(comp)
for v in sorted(edges):
    if v not in idx: sc(v)
rel = lambda x: os.path.relpath(x, src)

# Check 2: the folder order
layer_of = {u: i for i, layer in enumerate(LAYERS) for u in layer}
def unit(p):
    mp = files[p]
    for k in range(len(mp), -1, -1):
        u = '::'.join(mp[:k])
        if u in layer_of: return u
    return ''
bad = []; pairs = {}
for a in sorted(edges):
    for b in sorted(edges[a]):
        ua, ub = unit(a), unit(b)
        if ua == ub: continue
        pairs.setdefault((ua, ub), []).append((rel(a), rel(b)))
        m = '::'.join(files[a])
        allowed = any(ub == to and (m == frm or m.startswith(frm + '::')) for frm, to in EXCEPTIONS)
        if not (layer_of[ub] < layer_of[ua] or allowed):
            bad.append((ua, ub, rel(a), rel(b)))

unplaced = sorted(rel(p) for p, mp in files.items() if mp and unit(p) == '')
for f in unplaced:
    print(f'not in the folder order: {f}; add its module to LAYERS in scripts/import_cycles.py')
if '--graph' in sys.argv:
    for (ua, ub), fl in sorted(pairs.items()):
        print(f'{ua or "(root)"} -> {ub or "(root)"}: {len(fl)} ({fl[0][0]} -> {fl[0][1]})')
    sys.exit(0)
for comp in sccs:
    print('cycle:', ' '.join(sorted(rel(x) for x in comp)))
    for a in sorted(comp):
        for b in sorted(edges[a]):
            if b in comp: print('   ', rel(a), '->', rel(b))
for ua, ub, a, b in bad:
    print(f'against the folder order: {a} ({ua or "root"}) imports {b} ({ub or "root"}); '
          'see LAYERS in scripts/import_cycles.py')
print(f'{len(sccs)} cycles, {len(bad)} imports against the folder order, {sum(map(len, edges.values()))} imports between {len(files)} files')
sys.exit(1 if sccs or bad or unplaced else 0)
