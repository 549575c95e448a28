"""The library's modules form no loop: a module (a folder of libcore/include/mbkit/ and
libcore/src/) depends on another when one of its files includes the other's header or declares
one of its classes (`namespace mbkit::bench { class DeviceBench; }` names bench's type as surely
as an include does), and no chain of such dependencies comes back to where it started. A failure
names every cycle, with one line per edge.

The CUDA plugin (backend/cuda, built into libmbkit-cuda) is a module of its own here: it is a
separate library that implements interfaces of the core's modules, and the core reaches it only
through the plugin's table (mbkit/plugin/), never through its headers.

Run with --print to list the module graph's edges."""

import os
import re
import sys
import unittest

SOURCE_DIR = os.environ.get("MBKIT_SOURCE_DIR") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROOTS = [os.path.join(SOURCE_DIR, "libcore", "include", "mbkit"),
         os.path.join(SOURCE_DIR, "libcore", "src")]
SOURCE_SUFFIXES = (".hpp", ".cpp", ".h", ".cu", ".cuh", ".hpp.in")
# Sub-folders that are modules of their own rather than part of their parent.
SUBMODULES = {"backend/cuda"}
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"mbkit/([^"]+)"', re.M)
# `namespace mbkit::nn {` followed by a class declared but not defined there.
FORWARD_DECLARATION = re.compile(
    r'^[ \t]*namespace[ \t]+mbkit::([a-z_]+)(?:::[a-z_:]+)?[ \t]*\{[ \t]*\n'
    r'(?:[ \t]*(?:class|struct)[ \t]+\w+[ \t]*;[ \t]*\n)+', re.M)


def module_of(relative_path):
    """The module a path under a root (or an include's path after "mbkit/") belongs to; None for
    files at the top (config.hpp)."""
    parts = relative_path.split("/")
    if len(parts) < 2:
        return None
    if len(parts) >= 3 and "/".join(parts[:2]) in SUBMODULES:
        return "/".join(parts[:2])
    return parts[0]


def source_files():
    for root in ROOTS:
        for directory, _, names in os.walk(root):
            for name in sorted(names):
                if name.endswith(SOURCE_SUFFIXES):
                    path = os.path.join(directory, name)
                    yield path, os.path.relpath(path, root)


def module_graph():
    """{module: {dependency: "file:line: #include ..." (the first such line)}}."""
    graph = {}
    for path, relative in source_files():
        module = module_of(relative)
        if module is None:
            continue
        graph.setdefault(module, {})
        with open(path, encoding="utf-8") as file:
            text = file.read()
        found = [(module_of(m.group(1)), m) for m in INCLUDE.finditer(text)]
        found += [(m.group(1), m) for m in FORWARD_DECLARATION.finditer(text)]
        for dependency, match in sorted(found, key=lambda item: item[1].start()):
            if dependency is None or dependency == module:
                continue
            line = text.count("\n", 0, match.start()) + 1
            where = os.path.relpath(path, SOURCE_DIR)
            what = " ".join(match.group(0).split())
            graph[module].setdefault(dependency, f"{where}:{line}: {what}")
            graph.setdefault(dependency, {})
    return graph


def strongly_connected(graph):
    """Tarjan's strongly connected components with more than one module, each sorted."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for next_node in sorted(graph[node]):
            if next_node not in index:
                visit(next_node)
                low[node] = min(low[node], low[next_node])
            elif next_node in on_stack:
                low[node] = min(low[node], index[next_node])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(components)


def shortest_path(graph, members, source, target):
    """The shortest path source ... target inside `members` (breadth first, in name order)."""
    previous, frontier = {source: None}, [source]
    while frontier and target not in previous:
        next_frontier = []
        for node in frontier:
            for next_node in sorted(graph[node]):
                if next_node in members and next_node not in previous:
                    previous[next_node] = node
                    next_frontier.append(next_node)
        frontier = next_frontier
    path, node = [], target
    while node is not None:
        path.append(node)
        node = previous[node]
    return path[::-1]


def cycles_covering(graph, component):
    """For each dependency inside a strongly connected component, the shortest cycle through
    it; each cycle once, starting at its smallest module. Together they show every edge that
    takes part in a loop, without listing every longer loop those edges also make."""
    members = set(component)
    cycles = set()
    for here in component:
        for there in graph[here]:
            if there in members:
                cycle = [here] + shortest_path(graph, members, there, here)[:-1]
                smallest = cycle.index(min(cycle))
                cycles.add(tuple(cycle[smallest:] + cycle[:smallest]))
    return [list(cycle) + [cycle[0]] for cycle in sorted(cycles, key=lambda c: (len(c), c))]


def describe_cycle(graph, cycle):
    lines = [" -> ".join(cycle)]
    for here, there in zip(cycle, cycle[1:]):
        lines.append(f"  {here} -> {there}: {graph[here][there]}")
    return "\n".join(lines)


class ModuleGraph(unittest.TestCase):
    def test_every_module_is_seen(self):
        # A checker that read nothing would pass: the graph must hold the modules it guards.
        graph = module_graph()
        for module in ("backend", "bench", "comm", "util", "train", "metrics"):
            self.assertIn(module, graph)
        self.assertIn("util", graph["backend"], "backend's includes of util were not found")

    def test_a_planted_cycle_is_named(self):
        # The search itself, on a graph with a known loop a -> b -> c -> a beside a leaf d.
        graph = {"a": {"b": "a:1", "d": "a:2"}, "b": {"c": "b:1"}, "c": {"a": "c:1"}, "d": {}}
        self.assertEqual(strongly_connected(graph), [["a", "b", "c"]])
        self.assertEqual(cycles_covering(graph, ["a", "b", "c"]), [["a", "b", "c", "a"]])
        self.assertIn("  c -> a: c:1", describe_cycle(graph, ["a", "b", "c", "a"]))

    def test_a_forward_declaration_is_a_dependency(self):
        text = "namespace mbkit::bench {\nclass DeviceBench;\n}\n"
        self.assertEqual([m.group(1) for m in FORWARD_DECLARATION.finditer(text)], ["bench"])
        self.assertEqual(module_of("backend/cuda/nccl.hpp"), "backend/cuda")
        self.assertEqual(module_of("backend/factory.hpp"), "backend")

    def test_no_cycle_between_modules(self):
        graph = module_graph()
        components = strongly_connected(graph)
        cycles = [cycle for component in components
                  for cycle in cycles_covering(graph, component)]
        if cycles:
            self.fail("modules in a loop: " + "; ".join(", ".join(c) for c in components) +
                      f"\n{len(cycles)} module cycle(s), shortest first:\n" +
                      "\n".join(describe_cycle(graph, cycle) for cycle in cycles))


if __name__ == "__main__":
    if "--print" in sys.argv:
        graph = module_graph()
        for module in sorted(graph):
            print(f"{module} -> {', '.join(sorted(graph[module])) or '(none)'}")
        sys.exit(0)
    unittest.main()
