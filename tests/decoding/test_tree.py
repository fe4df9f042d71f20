"""Token trees: specs, the ancestor-mask pass, path gathering, greedy exactness."""
import dataclasses
import functools
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.decoding import tree as tree_lib
from specjax.tune import tree as tree_auto
from specjax.decoding.tree import TreeSpec
from specjax.models import KVCache
from specjax.models.cache import gather_path
from specjax.models.interface import Decoder
from specjax.training.draft import build_feature_draft
from tiny_models import random_prompts, tiny

TARGET = tiny("llama", seed=0)
# A draft that agrees often but not always: the target with slightly perturbed weights.
_noise = jax.tree.map(lambda x, k: x + 0.08 * jax.random.normal(k, x.shape, x.dtype),
                      TARGET.params, jax.tree.unflatten(
                          jax.tree.structure(TARGET.params),
                          list(jax.random.split(jax.random.PRNGKey(9),
                                                len(jax.tree.leaves(TARGET.params))))))
PERTURBED = dataclasses.replace(TARGET, params=_noise, name="perturbed")
_FCFG, _FPARAMS = build_feature_draft(TARGET.cfg, TARGET.params, n_layers=1,
                                      key=jax.random.PRNGKey(3), init_std=0.3)
FEATURE = dataclasses.replace(TARGET, cfg=_FCFG, params=_FPARAMS, name="feature")


def test_static_spec_shapes_and_errors():
  t = TreeSpec.static((3, 2, 1))
  assert t.n_nodes == 3 + 6 + 6 and t.depth == 3
  assert t.parents[:5] == (0, 0, 0, 0, 1) and t.depths[-1] == 3
  lo, hi, par, rank = t.level(2)
  assert (lo, hi) == (4, 10) and par.tolist() == [0, 0, 1, 1, 2, 2]
  assert rank.tolist() == [0, 1] * 3
  assert tree_lib.parse_tree("static:4,2,2,1", 4).n_nodes == 4 + 8 + 16 + 16
  with pytest.raises(ValueError, match="lists 3 branching factors but k=4"):
    tree_lib.parse_tree("static:2,2,1", 4)
  with pytest.raises(ValueError, match="Cannot read tree"):
    tree_lib.parse_tree("bushy:3", 2)
  with pytest.raises(ValueError, match="only 10 candidates"):
    tree_lib.parse_tree("dynamic:11:2", 3)
  with pytest.raises(ValueError, match="earlier node"):
    TreeSpec.from_parents([0, 2, 1])
  with pytest.raises(ValueError, match="needs a drafter"):
    specjax.generate(TARGET, [[1, 2]], 3, tree="static:2")
  with pytest.raises(ValueError, match="depth 2 but k=3"):
    specjax.generate(TARGET, [[1, 2]], 3, draft=PERTURBED, k=3, tree=TreeSpec.static((2, 2)))


def test_ancestor_mask():
  t = TreeSpec.from_parents([0, 0, 1, 1, 2])  # nodes 1, 2 under the root; 3, 4 under 1; 5 under 2
  anc = np.asarray(tree_lib.ancestors(jnp.asarray(t.parents)[None], t.depth))[0]
  assert anc[5].nonzero()[0].tolist() == [0, 2, 5]
  assert anc[3].nonzero()[0].tolist() == [0, 1, 3]
  mask = np.asarray(tree_lib.tree_mask(jnp.array([4]), jnp.asarray(anc)[None], 12))[0]
  assert mask[5].nonzero()[0].tolist() == [0, 1, 2, 3, 4, 6, 9]


def test_tree_pass_matches_forward_along_each_branch():
  """One pass over a tree with positions P + depth and the ancestor mask gives, at every
  node, the logits of a plain causal forward over the prefix and that node's branch; and
  gather_path moves a branch's cache entries to contiguous slots equal to a chain pass."""
  for family in ("llama", "gpt2"):
    model = tiny(family, seed=4)
    dec = Decoder(model.params, model.cfg)
    t = TreeSpec.static((2, 2))
    prompt = jnp.array([[5, 9, 2, 7, 1, 0, 0, 0], [3, 4, 0, 0, 0, 0, 0, 0]])
    lens = jnp.array([5, 2])
    _, cache = dec.prefill(prompt, lens, 32)
    toks = jnp.array([[1, 11, 12, 13, 14, 15, 16], [4, 21, 22, 23, 24, 25, 26]])
    parents = jnp.broadcast_to(jnp.asarray(t.parents), (2, 7))
    anc = tree_lib.ancestors(parents, t.depth)
    depths = jnp.asarray(t.depths)[None]
    hidden, tcache = dec.step(toks, lens[:, None] + depths, tree_lib.tree_mask(lens, anc, 32), cache)
    logits = np.asarray(dec.head(hidden))
    for b in range(2):
      for node in range(7):
        branch = [i for i in range(7) if anc[b, node, i]]
        seq = list(np.asarray(prompt[b, :lens[b]])) + [int(toks[b, i]) for i in branch]
        want = np.asarray(model.logits(jnp.asarray([seq])))[0, -1]
        np.testing.assert_allclose(logits[b, node], want, atol=1e-4, rtol=1e-4)
    path = jnp.array([[0, 2, 6], [0, 1, 3]])
    moved = gather_path(tcache, lens, path)
    chain_toks = jnp.take_along_axis(toks, path, 1)
    _, chain = dec.step(chain_toks, None, None, cache)
    for b in range(2):
      sl = slice(int(lens[b]), int(lens[b]) + 3)
      for layer in range(model.cfg.n_layers):
        np.testing.assert_allclose(moved.k[layer][b, ..., sl], chain.k[layer][b, ..., sl], atol=1e-5)
        np.testing.assert_allclose(moved.v[layer][b, :, sl], chain.v[layer][b, :, sl], atol=1e-5)


CASES = [("perturbed", "static:3,2,1", 3), ("perturbed", "dynamic:10:3", 3),
         ("perturbed", "static:2,2,2,2:sample", 4), ("feature", "static:3,2,1", 3),
         ("feature", "dynamic:6", 2), ("early_exit:1", "static:2,2,1", 3),
         ("early_exit:2", "dynamic:12", 4), ("ngram:2", "static:3,1,1", 3),
         ("feature+lookup", "dynamic:6", 3), ("feature+lookup", "static:2,2,1", 3)]
PROMPTS = random_prompts(5, TARGET.cfg.vocab_size, lo=1, hi=14, seed=3)  # ragged rows
PROMPTS[1] = PROMPTS[1] * 3  # a repetitive row, so n-gram matches get accepted too


def _feature_and_lookup():
  from specjax.decoding.drafters import LookupFirstDrafter
  from specjax.api import resolve_drafter
  return LookupFirstDrafter(base=resolve_drafter(FEATURE, TARGET), n=3)


@functools.lru_cache(maxsize=None)
def _target_alone():
  return specjax.generate(TARGET, PROMPTS, 20)


@pytest.mark.parametrize("draft,tree,k", CASES)
def test_tree_greedy_equals_target(draft, tree, k):
  prompts = PROMPTS
  base = _target_alone()
  drafter = {"perturbed": PERTURBED, "feature": FEATURE,
             "feature+lookup": _feature_and_lookup()}.get(draft, draft)
  out = specjax.generate(TARGET, prompts, 20, draft=drafter, k=k, tree=tree)
  assert out.tokens == base.tokens
  assert out.stats.new_tokens.tolist() == [20] * 5
  assert (out.stats.target_passes <= base.stats.target_passes).all()
  if draft == "feature+lookup":  # the repetitive row's lookup chain is accepted too
    alone = specjax.generate(TARGET, prompts, 20, draft=FEATURE, k=k, tree=tree)
    assert out.stats.tokens_per_pass > alone.stats.tokens_per_pass
    assert out.stats.nodes_per_round == alone.stats.nodes_per_round + k
  if draft == "perturbed":  # a draft that agrees often: the tree gains over the chain
    chain = specjax.generate(TARGET, prompts, 20, draft=drafter, k=k)
    assert out.stats.tokens_per_pass > chain.stats.tokens_per_pass


def test_auto_tree_choice():
  """Expected tokens under per-rank acceptance, and the choice following the pass cost."""
  accept = [[0.6, 0.5, 0.4, 0.3]] * 3
  assert tree_auto.expected_tokens((1, 1, 1), accept) == pytest.approx(1 + 0.6 + 0.36 + 0.216)
  # Two children at depth 1: 0.6 + 0.4 * 0.5 = 0.8 reach depth 1, each then a chain of 0.6.
  assert tree_auto.expected_tokens((2, 1), accept) == pytest.approx(1 + 0.8 + 0.8 * 0.6)
  flat = tree_auto.choose(accept, lambda t: 1.0, 0.0, 3, calibration=(4, 2, 2))
  assert flat[0] == (4, 2, 2)  # passes cost the same whatever their size: the widest tree
  steep = tree_auto.choose(accept, lambda t: float(t), 0.0, 3, calibration=(4, 2, 2))
  assert steep[0] == (1,)  # cost proportional to size: the shortest chain (1.6 / 2 tokens)
  # A pass costing 1 + T/8 and a draft step 0.05: depth 2 beats depths 1 and 3 among
  # chains, and the choice is the best of all depths (checked by brute force here).
  cost = lambda t: 1.0 + t / 8
  best = tree_auto.choose(accept, cost, 0.05, 3, calibration=(4, 2, 2))
  rates = {b: tree_auto.expected_tokens(b, accept) / (len(b) * 0.05 + cost(
      tree_auto.TreeSpec.static(b).n_nodes + 1))
      for d in (1, 2, 3) for b in tree_auto.candidates(d, (4, 2, 2)[:d])}
  assert best[0] == max(rates, key=rates.get) and len(set(map(len, rates))) == 3
  # The shortlist: the model's best two branching trees and every chain, whatever the
  # model predicts for the chains (here the deepest chain ranks below many trees).
  ranking = tree_auto.ranked(accept, lambda t: 1.0, 0.0, 3, calibration=(4, 2, 2))
  listed = [c[0] for c in tree_auto.shortlist(ranking)]
  assert sorted(b for b in listed if max(b) == 1) == [(1,), (1, 1), (1, 1, 1)]
  assert [b for b in listed if max(b) > 1] == [c[0] for c in ranking if max(c[0]) > 1][:2]


def test_auto_tree_times_finalists_on_every_calibration_batch():
  """The finalists run round-robin over the calibration prompts in batches of the
  caller's size; per batch the fastest round counts, and the rates are summed tokens over
  summed time, so one prompt where a finalist happens to be fast does not decide."""
  calib = ["p0", "p1", "p2", "p3"]
  assert tree_auto.timing_batches(calib, ["x"]) == [["p0"], ["p1"], ["p2"], ["p3"]]
  assert tree_auto.timing_batches(calib, ["x", "y"]) == [["p0", "p1"], ["p2", "p3"]]
  assert tree_auto.timing_batches(calib, ["x"] * 3) == [["p0", "p1", "p2"]]
  assert tree_auto.timing_batches(calib, ["x"] * 5) == [["x"] * 5]
  # seconds per (finalist, prompt, round): "a" wins on p0 alone, "b" over all four
  walls = {("a", "p0"): [1.0, 2.0], ("a", "p1"): [4.0, 5.0], ("a", "p2"): [4.0, 4.0],
           ("a", "p3"): [4.0, 4.0], ("b", "p0"): [3.0, 2.0], ("b", "p1"): [2.0, 2.0],
           ("b", "p2"): [2.0, 3.0], ("b", "p3"): [2.0, 2.0]}
  calls = []

  def run(f, batch):
    calls.append((f, batch[0]))
    wall = walls[(f, batch[0])][sum(c == (f, batch[0]) for c in calls) - 1]
    return types.SimpleNamespace(wall_time_s=wall, new_tokens=np.array([10]))

  rates = tree_auto.time_finalists(run, ["a", "b"], [[p] for p in calib])
  assert rates == pytest.approx([40 / 13, 40 / 8])
  order = [(f, p) for f in "ab" for p in calib]
  assert calls == order + order  # round-robin: every finalist and batch, then again


@pytest.mark.parametrize("draft", ["perturbed", "feature", "early_exit:1"])
def test_single_branch_tree_equals_chain(draft):
  """A tree with one child per node is the chain: token for token, count for count,
  greedy and sampled (the same random numbers are drawn in the same order)."""
  drafter = {"perturbed": PERTURBED, "feature": FEATURE}.get(draft, draft)
  prompts = random_prompts(4, TARGET.cfg.vocab_size, seed=2)
  for temperature, children in ((0.0, "topk"), (1.0, "sample")):
    chain = specjax.generate(TARGET, prompts, 16, draft=drafter, k=3, temperature=temperature,
                             seed=5)
    tree = specjax.generate(TARGET, prompts, 16, draft=drafter, k=3, temperature=temperature,
                            seed=5, tree=TreeSpec.static((1, 1, 1), children))
    assert tree.tokens == chain.tokens
    for name in ("target_passes", "draft_passes", "rounds", "checked", "accepted"):
      np.testing.assert_array_equal(getattr(tree.stats, name), getattr(chain.stats, name))


def test_ngram_candidates():
  from specjax.decoding.drafters import ngram_matches
  row = jnp.array([5, 6, 7, 8, 9, 1, 6, 7, 3, 5, 6, 7, 0, 0], jnp.int32)
  got = np.asarray(ngram_matches(row, jnp.int32(12), 3, 3, 3)[0])
  # "5 6 7" matches at 0 (-> 8 9 1); "6 7" also at 6 (-> 3 5 6); "7" nowhere else.
  assert got[0].tolist() == [8, 9, 1] and got[1].tolist() == [3, 5, 6]
  assert got[2].tolist() == [7, 7, 7]  # no third match: the last token repeated
  rng = np.random.default_rng(0)
  for _ in range(2):
    r = jnp.asarray(rng.integers(0, 4, 20), jnp.int32)
    np.testing.assert_array_equal(ngram_matches(r, jnp.int32(15), 3, 4, 1)[0][0],
                                  ngram_matches(r, jnp.int32(15), 3, 4)[0][0])


def _first_children_only(tokens, parents, q, p, key, depth):
  """Verifies a tree with every node but its parents' first children masked out."""
  keep = tree_lib.sibling_ranks(parents[None])[0] == 0
  return tree_lib.verify_tree_row(tokens, jnp.where(keep, parents, -1), q, p, key, depth)


def test_masked_tree_equals_chain():
  """A 3,2,2 tree whose every branch but the top-ranked one is masked out in verification
  is the greedy chain: token for token, count for count."""
  chain = specjax.generate(TARGET, PROMPTS, 20, draft=PERTURBED, k=3)
  tree = specjax.generate(TARGET, PROMPTS, 20, draft=PERTURBED, k=3, tree="static:3,2,2",
                          verifier=_first_children_only)
  assert tree.tokens == chain.tokens
  for name in ("target_passes", "rounds", "checked", "accepted"):
    np.testing.assert_array_equal(getattr(tree.stats, name), getattr(chain.stats, name))


def test_lookup_chain_layouts():
  """`with_chain` adds the chain under the root, first or after the tree per row: either
  way a tree whose parents come first, with the same root-to-node token paths."""
  t = TreeSpec.static((2, 1))
  b, v = 2, 16
  tokens = jnp.array([[9, 1, 2, 3, 4], [9, 5, 6, 7, 8]], jnp.int32)
  parents = jnp.broadcast_to(jnp.asarray(t.parents), (b, 5))
  draft = tree_lib.TreeDraft(tokens=tokens, parents=parents,
                             depths=jnp.broadcast_to(jnp.asarray(t.depths), (b, 5)),
                             q=jax.nn.one_hot(tokens, v).at[:, 0].set(0.0))
  chain = jnp.array([[1, 10, 11], [12, 13, 14]], jnp.int32)
  out = tree_lib.with_chain(draft, chain, jnp.array([True, False]))
  assert out.tokens.shape == (2, 8) and out.q.shape == (2, 8, v)

  def paths(row):
    par, tok, dep = (np.asarray(x[row]) for x in (out.parents, out.tokens, out.depths))
    got = set()
    for i in range(1, 8):
      assert par[i] < i and dep[i] == dep[par[i]] + 1
      np.testing.assert_array_equal(out.q[row, i], jax.nn.one_hot(tok[i], v))
      j, seq = i, []
      while j:
        seq.append(int(tok[j]))
        j = par[j]
      got.add(tuple(seq[::-1]))
    return got

  for row, first in ((0, True), (1, False)):
    want = {(1,), (2,), (1, 3), (2, 4)} if row == 0 else {(5,), (6,), (5, 7), (6, 8)}
    c = [int(x) for x in chain[row]]
    assert paths(row) == want | {tuple(c[:n]) for n in (1, 2, 3)}
    assert (out.tokens[row, 1:4].tolist() == c) == first  # the chain right after the root
  # Greedy: row 0's target follows "1 10 11"; the chain (first) is tried before the draft's
  # own "1" child, so the whole chain is accepted. p[j]: the target after node j.
  p = jax.nn.one_hot(jnp.array([1, 10, 11, 12, 0, 0, 0, 0]), v)
  path, n, nxt = tree_lib.verify_tree_row(out.tokens[0], out.parents[0], out.q[0], p,
                                          jax.random.PRNGKey(0), 3)
  assert int(n) == 3 and path.tolist() == [0, 1, 2, 3] and int(nxt) == 12


def test_auto_tree_with_the_lookup_chain(capsys):
  """tree='auto' with "<draft>+ngram": the model counts each tree's lookup chain in its
  pass; the chosen tree runs with the chain beside it and the output is the target's."""
  accept = [[0.6, 0.5, 0.4, 0.3]] * 3
  cost = lambda t: 1.0 + t / 8
  # A lookup-first chain accepting 0.8 per position: it adds 0.2, 0.2 + 0.64 - 0.36, ...
  gain = tree_auto.lookup_gain(accept, [0.8, 0.8, 0.8])
  assert gain == pytest.approx([0.0, 0.2, 0.2 + 0.64 - 0.36, 0.2 + 0.28 + 0.512 - 0.216])
  for b, e, rate in tree_auto.ranked(accept, cost, 0.05, 3, (4, 2, 2), lookup_gain=gain):
    assert e == pytest.approx(tree_auto.expected_tokens(b, accept) + gain[len(b)])
    extra = len(b) if max(b) > 1 else 0
    assert rate == pytest.approx(e / (0.05 * len(b) + cost(TreeSpec.static(b).n_nodes + 1 + extra)))
  out = specjax.generate(TARGET, PROMPTS, 20, draft=_feature_and_lookup(), k=3, tree="auto")
  assert out.tokens == _target_alone().tokens
  said = capsys.readouterr().out
  assert "tree='auto'" in said
  assert (out.stats.tree is None) == (", the chain" in said)
  if out.stats.tree is not None:
    assert "lookup chain" in out.stats.tree
