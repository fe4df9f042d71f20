"""Helpers shared by the curves and the benchmark: drafter lookup, the tree axis, merged stats."""
from __future__ import annotations

import json
import os
from typing import Optional

import numpy as np

from specjax.api.draft_spec import is_kind_spec, lookup_first, resolve_drafter
from specjax.decoding.stats import SpecStats
from specjax.errors import LoadError

def write_report(out: str, record, md: str) -> None:
  """Prints an experiment's markdown table and writes <out>.json (the record) and <out>.md."""
  print(md)
  with open(out + ".json", "w") as f:
    json.dump(record, f, indent=1)
  with open(out + ".md", "w") as f:
    f.write(md + "\n")


def load_drafts(names, allow_hub: bool = False, target=None) -> tuple[dict, list]:
  """{label: drafter} (resolved once by the draft-spec grammar) and [{"row", "note"}] for
  the ones skipped.

  Spec strings pass through; model sources are loaded once, also as the base of
  "<draft>+ngram:N" (`LookupFirstDrafter`: a bad combination raises). "asset:DIR" loads a shipped
  draft asset with its reduced output head (`specjax.loading.asset.load_asset`, the
  embeddings taken from `target`), where the registry name of the same draft gives the
  full-vocabulary export. A source that is neither a registry name nor an existing
  path is skipped (no hub lookup) unless allow_hub.
  """
  from specjax.loading import load_model
  from specjax.loading import registry
  drafts, skipped = {}, []
  for name in names:
    base, plus, lookup = name.rpartition("+")
    if plus:  # "<draft>+ngram:N": the base loaded once, prompt lookup put in front
      inner, skip = load_drafts([base], allow_hub, target)
      if skip:
        skipped.append({"row": name, "note": skip[0]["note"]})
        continue
      drafts[name] = lookup_first(next(iter(inner.values())), lookup, target, name)
      continue
    if is_kind_spec(name):
      drafts[name] = resolve_drafter(name, target)
      continue
    if name.startswith("asset:"):
      try:
        from specjax.loading.asset import load_asset
        path = os.path.expanduser(name[len("asset:"):])
        if not os.path.isabs(path) and not os.path.exists(path):  # relative to the repo root
          path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
              os.path.abspath(__file__)))), path)
        drafts["asset:" + os.path.basename(os.path.normpath(path))] = resolve_drafter(
            load_asset(path, target=target), target)
      except Exception as e:  # noqa: BLE001 - a draft that fails to load only skips its row
        skipped.append({"row": name, "note": f"draft asset {name!r} failed to load: {e}"})
      continue
    if not allow_hub and name not in registry.REGISTRY and not os.path.exists(
        os.path.expanduser(name)):
      skipped.append({"row": name, "note": f"draft {name!r} is not registered in "
                      f"specjax.loading.registry (known: {registry.names()}) and is not a local "
                      "path; row skipped"})
      continue
    try:
      drafts[name] = resolve_drafter(load_model(name, target=target), target)
    except Exception as e:  # noqa: BLE001 - a draft that fails to load only skips its row
      skipped.append({"row": name, "note": f"draft {name!r} failed to load: {e}"})
  return drafts, skipped


PER_ROW = ("new_tokens", "target_passes", "draft_passes", "rounds", "checked", "accepted")
TREE_PER_ROW = ("path_lengths", "rank_hits")  # [B, k+1], [B, k, R]; None in hand-made stats


def merge_stats(stats: list) -> SpecStats:
  """One SpecStats over several runs of the same setting (rows concatenated, wall times
  summed); the tree statistics are kept. Runs of different k or trees are refused."""
  if not stats:
    raise ValueError("merge_stats needs at least one SpecStats.")
  first = stats[0]
  for s in stats[1:]:
    if (s.k, s.tree, s.nodes_per_round) != (first.k, first.tree, first.nodes_per_round):
      raise ValueError(
          f"Cannot merge runs of different settings: k={first.k}, tree={first.tree!r} "
          f"({first.nodes_per_round} nodes per round) vs k={s.k}, tree={s.tree!r} "
          f"({s.nodes_per_round}); merge each setting's runs separately.")
  cat = lambda f: np.concatenate([np.asarray(getattr(s, f)) for s in stats], axis=0)
  extra = {}
  for f in TREE_PER_ROW:
    have = [getattr(s, f) is not None for s in stats]
    if any(have) and not all(have):
      raise ValueError(f"Cannot merge runs of which only some carry {f}; merge runs that "
                       "all come from generate (or none).")
    extra[f] = cat(f) if all(have) else None
  return SpecStats(k=first.k, **{f: cat(f) for f in PER_ROW},
                   wall_time_s=float(sum(s.wall_time_s for s in stats)),
                   prefill_time_s=float(sum(s.prefill_time_s for s in stats)),
                   compile_time_s=float(sum(s.compile_time_s for s in stats)),
                   compiled_programs=sum(s.compiled_programs for s in stats),
                   programs_from_disk=sum(s.programs_from_disk for s in stats),
                   nodes_per_round=first.nodes_per_round, tree=first.tree, **extra)


def select_rows(stats: SpecStats, rows, wall_time_s: float = 0.0) -> SpecStats:
  """The counters of some rows of a (merged) run, tree statistics included; wall_time_s
  0 when not separable."""
  idx = np.asarray(list(rows), dtype=np.int64)
  pick = lambda f: None if getattr(stats, f) is None else np.asarray(getattr(stats, f))[idx]
  return SpecStats(k=stats.k, **{f: pick(f) for f in PER_ROW + TREE_PER_ROW},
                   wall_time_s=wall_time_s, nodes_per_round=stats.nodes_per_round,
                   tree=stats.tree)


TREE_SEPARATOR = ";"  # between the trees of config.trees (the spec grammar uses ":" and ",")


def parse_trees(text: str, ks) -> dict:
  """config.trees ("static:4,2,1,1;dynamic:16", "" for none) -> {spec: [k it runs at]}.

  A static tree runs at k = its number of branching factors (its depth), which must be
  one of `ks`; a dynamic tree at every k of `ks` where it has enough candidates. One
  clear ValueError for a bad list, before any model loads.
  """
  specs = [t.strip() for t in str(text or "").split(TREE_SEPARATOR) if t.strip()]
  ks = sorted({int(k) for k in ks})
  from specjax.decoding.tree import parse_tree
  out = {}
  for spec in specs:
    kind, _, rest = spec.partition(":")
    if spec == "auto":
      raise ValueError("'auto' chooses a tree per generate call; run generate(tree='auto') "
                       "once and list the static tree it prints.")
    if sum(spec.count(x) for x in ("static:", "dynamic:")) > 1:
      raise ValueError(f"{spec!r} holds several trees: separate trees with "
                       f"{TREE_SEPARATOR!r}, e.g. 'static:4,2,1,1{TREE_SEPARATOR}dynamic:16'.")
    if kind == "static":
      depth = len(rest.split(":")[0].split(","))
      parse_tree(spec, depth)  # a bad factor: the parser's own message
      if depth not in ks:
        raise ValueError(f"tree {spec!r} has depth {depth} (one branching factor per draft "
                         f"step) but k runs over {ks}; add {depth} to k or change the tree.")
      fits = [depth]
    elif kind == "dynamic":
      fits, last = [], None
      for k in ks:
        try:
          parse_tree(spec, k)
          fits.append(k)
        except ValueError as e:
          last = e
      if not fits:
        raise ValueError(str(last)) from None
    else:
      raise ValueError(f"cannot read tree {spec!r}: use 'static:B1,..,Bk' (one branching "
                       f"factor per draft step) or 'dynamic:N[:beam]', separated by "
                       f"{TREE_SEPARATOR!r}.")
    out[spec] = fits
  return out


def tree_note(draft, target, label: str, tree: str) -> Optional[str]:
  """None when the drafter `draft` (anything `generate` accepts) drafts the tree `tree`
  (a spec), else the note of the skipped (drafter, tree) setting."""
  caps = resolve_drafter(draft, target).caps
  if not caps.tree_kinds or caps.owns_pass:
    return f"{label!r} does not draft token trees; only its chain is measured"
  kind = tree.partition(":")[0]
  if kind not in caps.tree_kinds:
    return f"{label!r} does not expand {kind} trees; {tree!r} is not measured for it"
  return None


def tree_fields(stats: SpecStats) -> dict:
  """The tree axis of a record: nodes verified per round, the histogram of accepted
  drafts per round (path_lengths[n] = rounds that accepted n) and its mean, and the
  per-depth / per-rank acceptance."""
  d = stats.to_dict()
  hist = d.get("path_lengths")
  rounds = sum(hist) if hist else 0
  return {"tree_shape": d["tree"], "nodes_per_round": d["nodes_per_round"],
          "path_lengths": hist,
          "mean_accepted_path": (sum(n * h for n, h in enumerate(hist)) / rounds
                                 if rounds else None),
          "per_depth_acceptance": d["per_position_acceptance"],
          "per_rank_acceptance": d.get("per_rank_acceptance")}


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
  return float(a / b) if a is not None and b else None
