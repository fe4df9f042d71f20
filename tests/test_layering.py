"""The package's layering, derived from the source: no import cycle among specjax modules,
and `decoding` imports neither loading, tuning, the API, applications nor training.

Every import counts, module-level or inside a function. A planted cycle must fail
(`test_a_planted_cycle_is_found`), so the check can fail.
"""
from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "specjax")
FORBIDDEN = {  # package -> packages it must not import
    "specjax.decoding": ("specjax.loading", "specjax.tune", "specjax.api", "specjax.apps",
                         "specjax.training"),
    "specjax.models": ("specjax.decoding", "specjax.loading", "specjax.tune", "specjax.api",
                       "specjax.apps", "specjax.training"),
    "specjax.loading": ("specjax.decoding", "specjax.tune", "specjax.api", "specjax.apps",
                        "specjax.training"),
    "specjax.tune": ("specjax.api", "specjax.apps", "specjax.training", "specjax.loading"),
    "specjax.parallel": ("specjax.",),
}


def module_name(path: str, root: str) -> str:
  rel = os.path.relpath(path, os.path.dirname(root))[:-3].replace(os.sep, ".")
  return rel[:-len(".__init__")] if rel.endswith(".__init__") else rel


def import_graph(root: str = ROOT) -> dict:
  """{module: set of specjax modules it imports} over every .py file under root."""
  files = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".py")]
  modules = {module_name(f, root): f for f in files}
  graph = {}
  for name, path in modules.items():
    deps = set()
    for node in ast.walk(ast.parse(open(path).read())):
      if isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
      elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        subs = [f"{node.module}.{a.name}" for a in node.names]  # `from pkg import module`
        targets = subs + ([node.module] if not all(t in modules for t in subs) else [])
      else:
        continue
      deps |= {t for t in targets if t in modules and t != name}
    graph[name] = deps
  return graph


def find_cycle(graph: dict):
  """A list of modules forming a cycle, or None (iterative depth-first search)."""
  state, stack = {}, []
  for start in sorted(graph):
    if start in state:
      continue
    todo = [(start, iter(sorted(graph[start])))]
    state[start], stack = 1, [start]
    while todo:
      node, it = todo[-1]
      nxt = next(it, None)
      if nxt is None:
        state[node] = 2
        stack.pop()
        todo.pop()
      elif state.get(nxt) == 1:
        return stack[stack.index(nxt):] + [nxt]
      elif nxt not in state:
        state[nxt] = 1
        stack.append(nxt)
        todo.append((nxt, iter(sorted(graph[nxt]))))
  return None




def violations(graph: dict) -> list:
  out = []
  for mod, deps in graph.items():
    for pkg, banned in FORBIDDEN.items():
      if mod == pkg or mod.startswith(pkg + "."):
        out += [(mod, d) for d in deps if any(d == b or d.startswith(b) for b in banned)
                and not (d == pkg or d.startswith(pkg + "."))]
  return out


def test_no_import_cycle_among_specjax_modules():
  cycle = find_cycle(import_graph())
  assert cycle is None, " -> ".join(cycle)


def test_layers_import_only_downwards():
  assert violations(import_graph()) == []


def test_a_planted_cycle_is_found(tmp_path):
  pkg = tmp_path / "specjax"
  (pkg / "decoding").mkdir(parents=True)
  (pkg / "__init__.py").write_text("")
  (pkg / "decoding" / "__init__.py").write_text("")
  (pkg / "decoding" / "loop.py").write_text("def f():\n  from specjax.decoding import plan\n")
  (pkg / "decoding" / "plan.py").write_text("import specjax.tune.costs\n")
  (pkg / "tune").mkdir()
  (pkg / "tune" / "__init__.py").write_text("")
  (pkg / "tune" / "costs.py").write_text("from specjax.decoding.loop import f\n")
  graph = import_graph(str(pkg))
  assert find_cycle(graph) is not None
  assert ("specjax.decoding.plan", "specjax.tune.costs") in violations(graph)
