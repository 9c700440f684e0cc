#!/usr/bin/env python3
"""Finds files that import each other in a circle within a crate.

    scripts/import-cycles.py [CRATES_DIR]     (default: crates/ of this repository)

A file imports another when it names an item of the other's module by a `crate::`, `super::` or
`self::` path (in a `use` or inline); a name the crate root re-exports counts as the module it
comes from. Comments and `#[cfg(test)]` modules are left out: tests may reach anywhere. A module
and the modules below it may use each other (a parent that dispatches to its children, children
that use their parent's helpers: the dispatcher -> handlers shape); any other circle is reported,
one line per crate and circle, and the exit code is 1. It reads the sources as text, without a
Rust parser, so a path it cannot resolve is not counted (it may miss a circle; it does not
invent one).
"""

import os
import re
import sys
from collections import defaultdict


def modules(src):
    """Each module of a crate's `src/` by its path (`()` is the crate root), to its file."""
    files = {}
    for root, _, names in os.walk(src):
        for name in names:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(root, name)
            parts = os.path.relpath(path, src)[:-3].split(os.sep)
            if parts[-1] in ("lib", "main", "mod"):
                parts = parts[:-1]
            files[tuple(parts)] = path
    return files


def reexports(files):
    """Names the crate root re-exports (`pub use module::{A, B};`, `pub use module::A;`), to the
    module each comes from."""
    root = files.get(())
    if root is None:
        return {}
    text = open(root, encoding="utf-8").read()
    out = {}
    for m in re.finditer(r"pub use (\w+)(?:::\w+)*::\{([^}]*)\};", text):
        for item in m.group(2).split(","):
            item = item.strip().split(" as ")[-1].strip()
            if item:
                out[item] = (m.group(1),)
    for m in re.finditer(r"pub use (\w+)::(\w+);", text):
        out[m.group(2)] = (m.group(1),)
    return out


def source(path):
    """A file's text without comments and without its `#[cfg(test)]` module."""
    text = open(path, encoding="utf-8").read()
    test = re.search(r"#\[cfg\(test\)\]\s*(pub(\(crate\))? )?mod \w+ \{", text)
    if test:
        text = text[: test.start()]
    return re.sub(r"//[^\n]*", "", text)


def is_test(module):
    return any(part in ("tests", "tests_support") for part in module)


def edges(files):
    """Which modules each module imports."""
    roots = reexports(files)

    def resolve(path):
        # The longest prefix of `path` that is a module; a root re-export counts as its module.
        for i in range(len(path), -1, -1):
            if tuple(path[:i]) in files:
                if i == 0 and path and path[0] in roots and roots[path[0]] in files:
                    return roots[path[0]]
                return tuple(path[:i])
        return None

    graph = defaultdict(set)
    for module, path in files.items():
        if module == () or is_test(module):
            continue
        text = source(path)
        # A `mod.rs` is its own module; `super` of any other file is its parent's parent.
        own = list(module)
        parent = own if path.endswith("mod.rs") else own[:-1]

        def base_of(head):
            return {"crate": [], "self": own, "super": parent[:-1] if path.endswith("mod.rs") else parent}[head]

        for m in re.finditer(r"\b(crate|super|self)((?:::\w+)+)", text):
            head, rest = m.group(1), [s for s in m.group(2).split("::") if s]
            base = base_of(head)
            while rest and rest[0] == "super":
                base, rest = base[:-1], rest[1:]
            graph[module].add(resolve(base + rest))
        for m in re.finditer(r"\b(crate|super|self)::\{([^}]*)\}", text):
            base = base_of(m.group(1))
            for item in m.group(2).split(","):
                item = item.strip().split("::")[0].strip()
                if item:
                    graph[module].add(resolve(base + [item]))
        graph[module] = {t for t in graph[module] if t not in (None, (), module) and not is_test(t)}
    return graph


def circles(graph, nodes):
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10_000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in nodes:
        if v not in index:
            visit(v)
    return found


def related(a, b):
    """One module is the other or below it."""
    return a[: len(b)] == b or b[: len(a)] == a


def main():
    crates = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "crates")
    bad = 0
    for crate in sorted(os.listdir(crates)):
        src = os.path.join(crates, crate, "src")
        if not os.path.isdir(src):
            continue
        files = modules(src)
        graph = edges(files)
        for component in circles(graph, list(files)):
            if all(related(a, b) for a in component for b in component):
                continue
            bad += 1
            names = sorted("/".join(m) for m in component)
            print(f"{crate}: {' <-> '.join(names)}")
            for m in sorted(component):
                targets = sorted("/".join(t) for t in graph[m] if t in component)
                print(f"    {'/'.join(m)} imports {', '.join(targets)}")
    if bad:
        print(f"{bad} import circle(s): move what both sides need to a module of its own")
        return 1
    print("no file imports another in a circle within a crate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
