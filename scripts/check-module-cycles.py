#!/usr/bin/env python3
"""Fails on a dependency cycle between the modules of one crate.

For each crate under crates/*/src this builds the graph of intra-crate module dependencies and exits 1,
printing each cycle as `crate: a -> b -> a` (with the reference behind each step), if there is one.

    scripts/check-module-cycles.py [--list] [--root DIR] [CRATE ...]
    scripts/check-module-cycles.py --self-test

  --list       also print every edge, with the first reference behind it and how many more there are
  --root DIR   the repository to check (default: the one this script lives in)
  CRATE ...    check only these crates (directory names under crates/)
  --self-test  check the checker on small in-memory crates, then exit

The rules:
- A module is a file's module path: src/lib.rs and src/main.rs are the root `crate`, src/a.rs and
  src/a/mod.rs are `a`, src/a/b.rs is `a::b`. Inline `mod x { .. }` blocks belong to their file's
  module (`super::` inside them resolves from the inline module, as rustc does).
- An edge A -> B exists when A's code names B through a `crate::`, `super::` or `self::` path: in a
  `use` (grouped `use crate::{a::X, b::{Y}}` included) or inline (`crate::b::f()`). A path maps to the
  longest module prefix that exists (`crate::a::b::T` is `a::b` if that module exists, else `a`).
- Not edges: `mod x;` declarations, `pub(in crate::a)` visibilities, paths in comments (doc links
  included) and in string literals (a serde `with = "crate::m"` would be missed; there is none),
  bare relative paths (`child::f()` from the parent), references to oneself, and anything into or
  out of the root module (lib.rs re-exports everything, so counting it would make every crate one
  cycle).
- Test code does not count: items under exactly `#[cfg(test)]` (`mod tests { .. }`, test-only `fn`s,
  `use`s; a `#[cfg(any(test, ..))]` item counts, as it builds outside tests too), files named
  tests.rs or under a tests/ directory inside src, and files declared `#[cfg(test)] mod x;`.
- A module's edge to its own ancestor is an edge like any other: a child using `super::T` while the
  parent uses `crate::parent::child::X` is a cycle.
- ALLOWED_CYCLES (below) lists, per crate, modules that may form cycles among themselves; a cycle is
  reported unless every module on it is listed.

Python 3.11, standard library only; reads ~2.5 MB of source in well under a second.
"""

from __future__ import annotations

import argparse
import bisect
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

# Cycles allowed per crate: a cycle is reported unless every module on it is listed here.
ALLOWED_CYCLES: dict[str, frozenset[str]] = {
    # The simulator's world and its actors call each other by design: the world delivers messages to
    # the brokers, clients and quorum nodes it owns, and they answer through it (and its network,
    # fault schedule and checker).
    "sim": frozenset({"world", "broker", "client", "faults", "quorum", "net", "check"}),
}

# Cycles printed per crate before the rest are only counted (the number of elementary cycles can grow
# exponentially with a dense group of modules).
CYCLES_PRINTED_MAX = 200
# Elementary cycles enumerated per strongly connected component, at most.
CYCLES_ENUMERATED_MAX = 5000

ROOT = "crate"
PATH_STARTS = frozenset({"crate", "$crate", "self", "super"})
ITEM_KEYWORDS = frozenset(
    {"mod", "fn", "impl", "trait", "struct", "enum", "union", "use", "const", "static", "type",
     "macro_rules", "extern", "unsafe", "async"}
)

# One token at a time. Comments, strings and character literals are matched so they can be dropped;
# lifetimes so that `'a` is not read as the start of a character literal.
TOKEN = re.compile(
    r"""
      (?P<ws>\s+)
    | (?P<line_comment>//[^\n]*)
    | (?P<block_comment>/\*)
    | (?P<raw_string>b?r(?P<hashes>\#*)")
    | (?P<string>b?"(?:\\.|[^"\\])*")
    | (?P<char>b?'(?:\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F_]*\}|.)|[^'\\\n])')
    | (?P<lifetime>'[A-Za-z_]\w*)
    | (?P<ident>(?:r\#)?\$?[A-Za-z_]\w*)
    | (?P<number>\d\w*)
    | (?P<path_sep>::)
    | (?P<punct>.)
    """,
    re.VERBOSE | re.DOTALL,
)
BLOCK_COMMENT_PART = re.compile(r"/\*|\*/")


@dataclass
class Reference:
    """One path in a module's source that names another module."""

    file: str
    line: int
    text: str


@dataclass
class SourceFile:
    module: str  # "crate" for the root, else "a::b"
    rel_path: str  # for messages: crates/<crate>/src/...
    text: str


@dataclass
class CrateGraph:
    name: str
    modules: set[str] = field(default_factory=set)
    # edges[a][b]: the references that make a depend on b, in source order
    edges: dict[str, dict[str, list[Reference]]] = field(default_factory=dict)


def tokenize(text: str) -> tuple[list[str], list[int]]:
    """The code tokens of a Rust source file, and the offset of each; comments and literals dropped."""
    tokens: list[str] = []
    offsets: list[int] = []
    pos = 0
    end = len(text)
    match_at = TOKEN.match
    while pos < end:
        m = match_at(text, pos)
        kind = m.lastgroup
        if kind == "hashes":  # the named group inside raw_string
            kind = "raw_string"
        if kind == "block_comment":
            depth = 1
            pos = m.end()
            while depth and pos < end:
                part = BLOCK_COMMENT_PART.search(text, pos)
                if part is None:
                    pos = end
                    break
                depth += 1 if part.group() == "/*" else -1
                pos = part.end()
            continue
        if kind == "raw_string":
            closing = '"' + m.group("hashes")
            close_at = text.find(closing, m.end())
            pos = end if close_at < 0 else close_at + len(closing)
            continue
        if kind in ("ident", "path_sep", "punct", "number"):
            tokens.append(m.group())
            offsets.append(m.start())
        pos = m.end()
    return tokens, offsets


def module_of(rel: Path) -> str | None:
    """The module path of a file relative to src/, or None for a file that is not a module of ours."""
    parts = list(rel.with_suffix("").parts)
    if parts[0] == "bin":
        return None  # separate binaries
    if parts[-1] == "tests" or "tests" in parts[:-1]:
        return None  # test files inside src
    if parts == ["lib"] or parts == ["main"]:
        return ROOT
    if parts[-1] == "mod":
        parts = parts[:-1]
    return "::".join(parts)


def skip_balanced(tokens: list[str], i: int) -> int:
    """Index just past the bracket group that opens at tokens[i]."""
    depth = 0
    n = len(tokens)
    while i < n:
        t = tokens[i]
        if t in "([{":
            depth += 1
        elif t in ")]}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return n


def is_cfg_test(tokens: list[str], i: int) -> bool:
    """Whether tokens[i:] start with `#[cfg(test)]`."""
    return tokens[i : i + 7] == ["#", "[", "cfg", "(", "test", ")", "]"]


def skip_test_item(tokens: list[str], i: int) -> tuple[int, str | None]:
    """Skips the item under a `#[cfg(test)]` that starts at tokens[i] (just past the attribute).

    Returns the index after the item and, for `mod x;`, the name x (a test-only file module). An
    attribute on something that is not an item (a field, a statement) skips nothing.
    """
    n = len(tokens)
    start = i
    while i < n and tokens[i] == "#":  # further attributes
        i = skip_balanced(tokens, i + 1)
    if i < n and tokens[i] == "pub":
        i += 1
        if i < n and tokens[i] == "(":
            i = skip_balanced(tokens, i)
    if i >= n or tokens[i] not in ITEM_KEYWORDS:
        return start, None
    if tokens[i] == "use":
        while i < n and tokens[i] != ";":
            i += 1
        return i + 1, None
    declared = None
    if tokens[i] == "mod" and i + 2 < n and tokens[i + 2] == ";":
        declared = tokens[i + 1]
    depth = 0
    while i < n:
        t = tokens[i]
        if t in "([":
            depth += 1
        elif t in ")]":
            depth -= 1
        elif depth == 0 and t == ";":
            return i + 1, declared
        elif depth == 0 and t == "{":
            return skip_balanced(tokens, i), None
        i += 1
    return n, None


def parse_use_tree(tokens: list[str], i: int, prefix: list[str]) -> tuple[list[list[str]], int]:
    """Parses a path, or a use tree with `{..}` groups, starting at tokens[i]; returns the full paths."""
    segments = list(prefix)
    n = len(tokens)
    while i < n:
        t = tokens[i]
        if t == "{":
            i += 1
            paths: list[list[str]] = []
            while i < n and tokens[i] != "}":
                sub, j = parse_use_tree(tokens, i, segments)
                paths.extend(sub)
                if j < n and tokens[j] == ",":
                    j += 1
                i = max(j, i + 1)  # always progress, even over something that is not a path
            return paths, i + 1
        if t == "*":
            return [segments], i + 1
        if t[0].isalpha() or t[0] in "_$":
            segments.append(t)  # a `self` leaf stays here; resolve() drops it
            i += 1
            if i < n and tokens[i] == "::":
                i += 1
                continue
            if i + 1 < n and tokens[i] == "as":
                i += 2
            return [segments], i
        return [segments], i
    return [segments], i


def resolve(segments: list[str], scope: list[str]) -> list[str] | None:
    """The absolute path (without `crate`) that `segments` names from inside `scope`."""
    head, rest = segments[0], segments[1:]
    if head in ("crate", "$crate"):
        base: list[str] = []
    elif head == "self":
        base = list(scope)
    elif head == "super":
        if not scope:
            return None
        base = scope[:-1]
        while rest and rest[0] == "super":
            if not base:
                return None
            base = base[:-1]
            rest = rest[1:]
    else:
        return None
    # `self` as a use-tree leaf (`use crate::a::{self}`) names the prefix itself.
    return base + [s for s in rest if s != "self"]


def longest_module(path: list[str], modules: set[str]) -> str:
    for k in range(len(path), 0, -1):
        name = "::".join(path[:k])
        if name in modules:
            return name
    return ROOT


def scan_file(src: SourceFile) -> tuple[list[tuple[list[str], int]], list[str]]:
    """The absolute paths a file names outside test code, each with its line; and its test-only
    `mod x;` children."""
    tokens, offsets = tokenize(src.text)
    if tokens[:8] == ["#", "!", "[", "cfg", "(", "test", ")", "]"]:
        return [], []
    line_starts = [0] + [m.end() for m in re.finditer("\n", src.text)]
    file_scope = [] if src.module == ROOT else src.module.split("::")
    inline: list[tuple[str, int]] = []  # inline modules open here: (name, brace depth outside it)
    depth = 0
    found: list[tuple[list[str], int]] = []
    test_children: list[str] = []
    n = len(tokens)
    i = 0
    while i < n:
        t = tokens[i]
        if t == "#" and is_cfg_test(tokens, i):
            j, declared = skip_test_item(tokens, i + 7)
            if declared:
                test_children.append(declared)
            i = max(j, i + 7)
            continue
        if t == "{":
            depth += 1
        elif t == "}":
            depth -= 1
            if inline and inline[-1][1] == depth:
                inline.pop()
        elif t == "mod" and i + 2 < n and tokens[i + 2] == "{":
            inline.append((tokens[i + 1], depth))
        elif (
            t in PATH_STARTS
            and i + 1 < n
            and tokens[i + 1] == "::"
            and (i == 0 or tokens[i - 1] != "::")
            and not (i >= 2 and tokens[i - 1] == "in" and tokens[i - 2] == "(")  # pub(in crate::a)
        ):
            scope = file_scope + [name for name, _ in inline]
            line = bisect.bisect_right(line_starts, offsets[i])
            paths, j = parse_use_tree(tokens, i, [])
            for segments in paths:
                absolute = resolve(segments, scope)
                if absolute is not None:
                    found.append((absolute, line))
            i = max(j, i + 1)
            continue
        i += 1
    return found, test_children


def build_graph(name: str, files: dict[str, str]) -> CrateGraph:
    """The module graph of one crate; `files` maps a path relative to src/ to its text."""
    sources: list[SourceFile] = []
    for rel, text in sorted(files.items()):
        if not rel.endswith(".rs"):
            continue
        module = module_of(Path(rel))
        if module is not None:
            sources.append(SourceFile(module, f"crates/{name}/src/{rel}", text))
    graph = CrateGraph(name)
    graph.modules = {s.module for s in sources if s.module != ROOT}
    scanned = [(s, *scan_file(s)) for s in sources]
    test_only = set()
    for s, _, children in scanned:
        for child in children:
            test_only.add(child if s.module == ROOT else f"{s.module}::{child}")
    def is_test(module: str) -> bool:
        return any(module == t or module.startswith(t + "::") for t in test_only)
    graph.modules = {m for m in graph.modules if not is_test(m)}
    for s, found, _ in scanned:
        if s.module == ROOT or is_test(s.module):
            continue
        out = graph.edges.setdefault(s.module, {})
        for absolute, line in found:
            target = longest_module(absolute, graph.modules)
            if target == ROOT or target == s.module:
                continue
            out.setdefault(target, []).append(Reference(s.rel_path, line, "::".join(absolute)))
    return graph


def strongly_connected(graph: CrateGraph) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    result: list[list[str]] = []
    counter = 0
    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.edges.get(v, {})):
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
                result.append(sorted(component))

    for v in sorted(graph.modules):
        if v not in index:
            visit(v)
    return result


def elementary_cycles(graph: CrateGraph, component: list[str]) -> tuple[list[list[str]], bool]:
    """The elementary cycles inside one component, each starting at its smallest module; and whether
    the enumeration stopped at CYCLES_ENUMERATED_MAX. A plain search per start module that only visits
    modules greater than the start, so each cycle is found exactly once."""
    members = set(component)
    cycles: list[list[str]] = []
    for start in component:
        path = [start]
        on_path = {start}
        iters = [iter(sorted(w for w in graph.edges.get(start, {}) if w in members and w >= start))]
        while iters:
            w = next(iters[-1], None)
            if w is None:
                iters.pop()
                on_path.discard(path.pop())
                continue
            if w == start:
                cycles.append(path + [start])
                if len(cycles) >= CYCLES_ENUMERATED_MAX:
                    return cycles, True
            elif w not in on_path:
                path.append(w)
                on_path.add(w)
                iters.append(iter(sorted(x for x in graph.edges.get(w, {}) if x in members and x >= start)))
    return cycles, False


def reported_cycles(graph: CrateGraph) -> tuple[list[list[str]], bool]:
    allowed = ALLOWED_CYCLES.get(graph.name, frozenset())
    cycles: list[list[str]] = []
    truncated = False
    for component in strongly_connected(graph):
        if set(component) <= allowed:
            continue
        found, cut = elementary_cycles(graph, component)
        truncated |= cut
        cycles.extend(c for c in found if not set(c) <= allowed)
    cycles.sort(key=lambda c: (len(c), c))
    return cycles, truncated


def describe(ref: Reference) -> str:
    return f"{ref.file}:{ref.line} crate::{ref.text}"


def check(graphs: list[CrateGraph], list_edges: bool, out=sys.stdout) -> int:
    """Prints what it finds; returns the number of cycles reported."""
    total = 0
    for graph in graphs:
        if list_edges:
            for a in sorted(graph.edges):
                for b in sorted(graph.edges[a]):
                    refs = graph.edges[a][b]
                    more = f" (+{len(refs) - 1} more)" if len(refs) > 1 else ""
                    print(f"edge {graph.name}: {a} -> {b}  {describe(refs[0])}{more}", file=out)
        cycles, truncated = reported_cycles(graph)
        for k, cycle in enumerate(cycles):
            if k == CYCLES_PRINTED_MAX:
                print(f"{graph.name}: ... and {len(cycles) - k} more cycles", file=out)
                break
            print(f"{graph.name}: {' -> '.join(cycle)}", file=out)
            for a, b in zip(cycle, cycle[1:]):
                print(f"    {a} -> {b}: {describe(graph.edges[a][b][0])}", file=out)
        if truncated:
            print(f"{graph.name}: (stopped counting at {CYCLES_ENUMERATED_MAX} cycles per component)", file=out)
        total += len(cycles)
    return total


def load_crates(root: Path, names: list[str]) -> list[CrateGraph]:
    graphs = []
    crate_dirs = sorted(p.parent for p in (root / "crates").glob("*/src"))
    known = {d.name for d in crate_dirs}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"check-module-cycles: no crate {', '.join(unknown)} under {root / 'crates'}")
    for crate_dir in crate_dirs:
        if names and crate_dir.name not in names:
            continue
        src = crate_dir / "src"
        files = {str(p.relative_to(src)): p.read_text(encoding="utf-8") for p in src.rglob("*.rs")}
        graphs.append(build_graph(crate_dir.name, files))
    return graphs


def self_test() -> int:
    """Checks the checker on small in-memory crates; returns 0 when all assertions hold."""
    import io

    def cycles_of(name: str, files: dict[str, str]) -> list[str]:
        out = io.StringIO()
        check([build_graph(name, files)], list_edges=False, out=out)
        return [l for l in out.getvalue().splitlines() if not l.startswith(" ")]

    def edges_of(name: str, files: dict[str, str]) -> set[tuple[str, str]]:
        graph = build_graph(name, files)
        return {(a, b) for a, bs in graph.edges.items() for b in bs}

    # A crate without a cycle, full of things that look like references and are not.
    acyclic = {
        "lib.rs": "pub mod a;\npub mod b;\nmod c;\npub use crate::a::A;\npub use b::B;\n",
        "a.rs": (
            "//! Names crate::b::B only in a comment.\n"
            "use crate::c::{self, Helper};\n"
            "use crate::Root; // re-exported from lib.rs: no edge into the root\n"
            "/* nested /* block */ crate::b::B */\n"
            "pub struct A;\n"
            "fn f() -> &'static str { let _c = 'x'; \"crate::b::B\" }\n"
            "fn g() { let _ = r#\"crate::b::x()\"#; self::inner(); }\n"
            "fn inner() {}\n"
            "#[cfg(test)]\n#[allow(unused)]\nmod tests {\n    use crate::b::B;\n    fn h() { crate::b::f(); }\n}\n"
            "#[cfg(test)]\nuse crate::b::Other;\n"
            "#[cfg(test)]\npub(crate) fn only_in_tests() { crate::b::f(); }\n"
            "pub fn after_tests() { crate::c::deep::g(); }\n"
            "pub(in crate::b) fn visible_in_b() {}\n"
        ),
        "b.rs": "use crate::a::A;\npub struct B;\npub fn f() {}\n",
        "c/mod.rs": "pub mod deep;\npub struct Helper;\nmod codes { pub use super::Helper; }\n#[cfg(test)]\nmod tests;\n",
        "c/deep.rs": "pub fn g() { super::super::Root::new(); }\n",
        "c/tests.rs": "use crate::a::A;\n",
    }
    assert cycles_of("acyclic", acyclic) == [], cycles_of("acyclic", acyclic)
    assert edges_of("acyclic", acyclic) == {("a", "c"), ("a", "c::deep"), ("b", "a")}, edges_of("acyclic", acyclic)

    # A crate with cycles: grouped use, inline paths, a child using super:: while its parent names it.
    cyclic = {
        "main.rs": "mod config;\nmod listeners;\nmod image;\n",
        "config.rs": "use crate::{image::{Image}, listeners::Listener as L};\n",
        "listeners.rs": "pub fn parse() { let _ = crate::config::Config::default(); }\n",
        "image/mod.rs": "mod records;\npub struct Image;\nfn apply() { crate::image::records::Record::new(); }\n",
        "image/records.rs": "use super::Image;\npub struct Record;\n",
    }
    assert cycles_of("cyclic", cyclic) == [
        "cyclic: config -> listeners -> config",
        "cyclic: image -> image::records -> image",
    ], cycles_of("cyclic", cyclic)

    # The simulator's allowlist: cycles among world and its actors pass, one through another module not.
    sim = {
        "lib.rs": "mod world;\nmod broker;\nmod log;\n",
        "world.rs": "use crate::broker::Broker;\n",
        "broker.rs": "use crate::world::World;\nuse crate::log::Log;\n",
        "log.rs": "use crate::world::World;\n",
    }
    assert cycles_of("sim", sim) == ["sim: broker -> log -> world -> broker"], cycles_of("sim", sim)
    assert cycles_of("other", sim) == [
        "other: broker -> world -> broker",
        "other: broker -> log -> world -> broker",
    ], cycles_of("other", sim)
    print("check-module-cycles: self-test passed")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="print every edge")
    parser.add_argument("--self-test", action="store_true", help="check the checker, then exit")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("crates", nargs="*", help="crate directory names (default: all)")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    graphs = load_crates(args.root, args.crates)
    cycles = check(graphs, args.list)
    if cycles:
        print(f"check-module-cycles: {cycles} module cycle(s); break each by moving the shared item to the "
              "module that owns the concept, or to a lower module")
        return 1
    print(f"check-module-cycles: no module cycles in {len(graphs)} crates")
    return 0


if __name__ == "__main__":
    sys.exit(main())
