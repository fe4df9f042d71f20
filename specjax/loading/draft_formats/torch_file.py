"""PyTorch checkpoint files (`torch.save`: pytorch_model.bin, medusa_lm_head.pt) read
into numpy without torch.

Published drafts (EAGLE-1's pytorch_model.bin, Medusa-1's medusa_lm_head.pt) often
ship only in this form. `torch.save` writes a zip archive: `<root>/data.pkl`, a pickle
whose tensors are persistent ids naming raw little-endian storages `<root>/data/<key>`,
rebuilt with `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)`.
The unpickler below resolves only those names (and OrderedDict): any other global in
the pickle is refused, so reading a file runs no code from it.

    tensors = read_torch_file(path, source)   # {name: np.ndarray}
    names = torch_file_names(path, source)    # the names, storages left unread

`file_shapes` / `read_weights` do the same for either kind of weights file (a
safetensors file or a torch one), so a loader can check shapes before reading.
"""
from __future__ import annotations

import collections
import pickle
import zipfile
from typing import Optional

import numpy as np

from specjax.errors import LoadError


def _bfloat16():
  import ml_dtypes  # a jax dependency; numpy has no bfloat16
  return ml_dtypes.bfloat16


# torch's typed storage class names -> numpy dtypes
_STORAGES = {"FloatStorage": np.float32, "HalfStorage": np.float16, "DoubleStorage": np.float64,
             "BFloat16Storage": None, "LongStorage": np.int64, "IntStorage": np.int32,
             "ShortStorage": np.int16, "CharStorage": np.int8, "ByteStorage": np.uint8,
             "BoolStorage": np.bool_}


class _StorageType:
  """Stands for `torch.<X>Storage` inside the pickle: only its dtype matters."""

  def __init__(self, name: str):
    self.name = name
    self.dtype = np.dtype(_bfloat16() if name == "BFloat16Storage" else _STORAGES[name])


class _Tensor:
  """A tensor not yet read: its storage key and layout (lazy, for name listings)."""

  def __init__(self, storage, offset, size, stride):
    self.storage, self.offset, self.size, self.stride = storage, offset, tuple(size), tuple(stride)

  def materialize(self) -> np.ndarray:
    flat = self.storage()  # [numel] of the storage's dtype
    if not self.size:
      return flat[self.offset].copy()
    item = flat.dtype.itemsize
    view = np.lib.stride_tricks.as_strided(flat[self.offset:], shape=self.size,
                                           strides=[s * item for s in self.stride])
    return np.ascontiguousarray(view)


def _rebuild_tensor(storage, offset, size, stride, *_):
  return _Tensor(storage, offset, size, stride)


def _rebuild_parameter(data, *_):
  return data


class _Unpickler(pickle.Unpickler):
  def __init__(self, file, archive: zipfile.ZipFile, root: str, source: str):
    super().__init__(file)
    self.archive, self.root, self.source = archive, root, source
    self.cache = {}

  def find_class(self, module: str, name: str):
    if module == "torch._utils" and name == "_rebuild_tensor_v2":
      return _rebuild_tensor
    if module == "torch._utils" and name == "_rebuild_parameter":
      return _rebuild_parameter
    if module == "torch" and name in _STORAGES:
      return _StorageType(name)
    if module == "collections" and name == "OrderedDict":
      return collections.OrderedDict
    raise LoadError(f"{self.source}: the torch file holds a {module}.{name} object, not only "
                    "tensors; re-save the state dict alone (torch.save(model.state_dict(), f)).")

  def persistent_load(self, pid):
    # ('storage', storage type, key, location, numel)
    if not (isinstance(pid, tuple) and pid and pid[0] == "storage"):
      raise LoadError(f"{self.source}: unexpected persistent id {pid!r} in the torch file.")
    _, stype, key, _, numel = pid
    dtype = stype.dtype if isinstance(stype, _StorageType) else None
    if dtype is None:
      raise LoadError(f"{self.source}: unsupported torch storage {stype!r}.")

    def read(key=key, dtype=dtype, numel=numel):
      if key not in self.cache:
        raw = self.archive.read(f"{self.root}/data/{key}")
        self.cache[key] = np.frombuffer(raw, dtype=dtype, count=numel)
      return self.cache[key]
    return read


def _tensors(path: str, source: str) -> dict:
  """{name: _Tensor} of a torch zip file, and the open archive (caller closes it)."""
  if not zipfile.is_zipfile(path):
    raise LoadError(f"{source}: {path} is not a torch zip checkpoint (torch >= 1.6 "
                    "`torch.save`); re-save it with a current torch or as safetensors.")
  archive = zipfile.ZipFile(path)
  pkl = [n for n in archive.namelist() if n.endswith("/data.pkl")]
  if len(pkl) != 1:
    archive.close()
    raise LoadError(f"{source}: {path} has no single data.pkl; not a torch.save checkpoint.")
  root = pkl[0][:-len("/data.pkl")]
  try:
    with archive.open(pkl[0]) as f:
      obj = _Unpickler(f, archive, root, source).load()
  except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as e:
    archive.close()
    if isinstance(e, LoadError):
      raise
    raise LoadError(f"{source}: cannot read {path} ({type(e).__name__}: {e}); the file is "
                    "corrupt or truncated.") from None
  if not isinstance(obj, dict) or not all(isinstance(v, _Tensor) for v in obj.values()):
    archive.close()
    raise LoadError(f"{source}: {path} is not a flat state dict of tensors.")
  return obj, archive


def torch_file_names(path: str, source: Optional[str] = None) -> set:
  """The tensor names of a torch checkpoint file (no storage is read)."""
  return set(torch_file_shapes(path, source))


def torch_file_shapes(path: str, source: Optional[str] = None) -> dict:
  """{name: shape} of a torch checkpoint file (no storage is read)."""
  tensors, archive = _tensors(path, source or path)
  archive.close()
  return {name: t.size for name, t in tensors.items()}


def is_safetensors(path: str) -> bool:
  return path.endswith(".safetensors")


def file_shapes(path: str, source: Optional[str] = None) -> dict:
  """{name: shape} of a safetensors or torch weights file, without reading the weights."""
  source = source or path
  if not is_safetensors(path):
    return torch_file_shapes(path, source)
  from safetensors import safe_open  # local: keeps `import specjax` light
  try:
    with safe_open(path, framework="numpy") as f:
      return {n: tuple(f.get_slice(n).get_shape()) for n in f.keys()}
  except Exception as e:  # safetensors raises its own error types and OSError
    raise LoadError(f"{source}: cannot read {path} ({type(e).__name__}: {e}); the file is "
                    "corrupt or truncated.") from None


def read_weights(path: str, source: Optional[str] = None) -> dict:
  """{name: numpy array} of a safetensors or torch weights file."""
  source = source or path
  if not is_safetensors(path):
    return read_torch_file(path, source)
  from specjax.loading.hf import read_safetensors
  return read_safetensors([path], source)


def read_torch_file(path: str, source: Optional[str] = None) -> dict:
  """{name: numpy array} of a torch checkpoint file (bfloat16 via ml_dtypes)."""
  tensors, archive = _tensors(path, source or path)
  try:
    return {name: t.materialize() for name, t in tensors.items()}
  finally:
    archive.close()
