"""The torch-free reader of torch.save checkpoints against torch itself."""
import collections
import os

import numpy as np
import pytest

from specjax.errors import LoadError
from specjax.loading.draft_formats.torch_file import read_torch_file, torch_file_names


def test_read_matches_torch(tmp_path):
  torch = pytest.importorskip("torch")
  g = torch.Generator().manual_seed(0)
  base = torch.randn(6, 5, generator=g)
  state = collections.OrderedDict([
      ("a.weight", torch.randn(4, 3, generator=g)),
      ("t.weight", base.t()),                        # non-contiguous view
      ("s.weight", base[2:4, 1:]),                   # offset into a shared storage
      ("h", torch.randn(7, generator=g).half()),
      ("bf", torch.randn(3, 2, generator=g).to(torch.bfloat16)),
      ("i", torch.arange(5, dtype=torch.int64)),
      ("scalar", torch.tensor(2.5)),
      ("p", torch.nn.Parameter(torch.randn(2, 2, generator=g))),
  ])
  path = os.path.join(tmp_path, "w.pt")
  torch.save(state, path)
  got = read_torch_file(path)
  assert torch_file_names(path) == set(state)
  for name, t in state.items():
    want = t.detach().float().numpy() if t.dtype == torch.bfloat16 else t.detach().numpy()
    assert got[name].shape == tuple(t.shape), name
    np.testing.assert_array_equal(np.asarray(got[name], np.float64 if t.is_floating_point()
                                             else np.int64), want, err_msg=name)


def test_refuses_code_and_non_zip(tmp_path):
  torch = pytest.importorskip("torch")
  path = os.path.join(tmp_path, "model.pt")
  torch.save({"w": torch.zeros(2), "cfg": torch.nn.Linear(2, 2)}, path)  # a module: code
  with pytest.raises(LoadError, match="not only tensors"):
    read_torch_file(path)
  bad = os.path.join(tmp_path, "bad.bin")
  with open(bad, "wb") as f:
    f.write(b"not a zip")
  with pytest.raises(LoadError, match="not a torch zip checkpoint"):
    read_torch_file(bad)
