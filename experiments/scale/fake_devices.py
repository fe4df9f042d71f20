"""Sharded decoding and distillation on 8 fake CPU devices vs one device.

    python experiments/scale/fake_devices.py     # writes experiments/scale/fake_devices.json

Runs the workers of tests/test_sharding.py with every decoding case on every mesh shape
((1, 8), (2, 4), (8, 1)): per case, whether tokens and stats equal the 1-device run;
and the tiny distillation on one device, on 2 x 4, and checkpointed on 2 x 4 then resumed
on 8 x 1: the largest relative loss difference to one device. Fake devices share the
host's cores, so no speed is measured here.
"""
import json
import os
import subprocess
import sys
import tempfile

import jax
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from specjax.models import init_params  # noqa: E402
from specjax.training import read_metrics, train  # noqa: E402
from specjax.training.export import export_hf  # noqa: E402
from tests import test_sharding as ts  # noqa: E402
from tests.training.test_training import _toy  # noqa: E402


def _worker(code: str) -> dict:
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8",
             JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
  proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                        cwd=ROOT)
  if proc.returncode:
    sys.exit(proc.stderr[-3000:])
  return json.loads(next(l for l in proc.stdout.splitlines() if l.startswith("JSON"))[4:])


def main():
  out = {}
  with tempfile.TemporaryDirectory() as tmp:
    tdir, ddir = os.path.join(tmp, "target"), os.path.join(tmp, "draft")
    export_hf(ts.TARGET, jax.device_get(init_params(ts.TARGET, jax.random.PRNGKey(1), std=0.3)), tdir)
    export_hf(ts.DRAFT, jax.device_get(init_params(ts.DRAFT, jax.random.PRNGKey(2), std=0.3)), ddir)
    cases = {m: ts.ALL_CASES for m in ("one", "1x8", "2x4", "8x1")}
    dec = _worker(ts._WORKER.format(root=ROOT, target=tdir, draft=ddir, mesh_cases=cases))
    one = dec["runs"]["one"]
    out["decoding"] = {
        "devices": dec["devices"], "cases": list(ts.ALL_CASES),
        "per_mesh": {m: {c: {"tokens_identical": dec["runs"][m][c]["tokens"] == one[c]["tokens"],
                             "stats_identical": dec["runs"][m][c]["stats"] == one[c]["stats"]}
                         for c in ts.ALL_CASES} for m in ("1x8", "2x4", "8x1")},
        "one_device_stats": {c: one[c]["stats"] for c in ts.ALL_CASES}}
    c = ts._train_config("")
    t, tp, hp = _toy(c)
    train(c, os.path.join(tmp, "one"), t, tp, hp, progress=False)
    l1 = [r["loss"] for r in read_metrics(os.path.join(tmp, "one")) if "loss" in r]
    tr = _worker(ts._TRAIN_WORKER.format(root=ROOT, work=tmp))
    rel = lambda run: float(max(abs(tr[run][str(s + 1)] - l1[s]) / abs(l1[s]) for s in range(6)))
    out["distillation"] = {"steps": 6, "loss_one_device": l1,
                           "max_rel_diff_2x4": rel("a"),
                           "max_rel_diff_2x4_resumed_on_8x1": rel("b"),
                           "tolerance_in_tests": 1e-4, "specs": tr["specs"]}
  path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_devices.json")
  with open(path, "w") as f:
    json.dump(out, f, indent=1)
  print(json.dumps(out["distillation"], indent=1))
  print({m: all(v["tokens_identical"] and v["stats_identical"] for v in d.values())
         for m, d in out["decoding"]["per_mesh"].items()})


if __name__ == "__main__":
  main()
