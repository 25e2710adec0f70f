"""Proposal masks and per-point arrays, turned into plain numpy without copying what is big.

The evaluator accepts what Pointcept and PointGroup hand over: torch tensors (CPU or
CUDA) or numpy arrays, dense ``[P, N]`` masks of any dtype, or `SparseMasks` rows.
torch is never imported here: a tensor is recognised by its type's module, so the
numpy paths work in an image without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]


def is_torch_tensor(value: object) -> bool:
    """True for a torch.Tensor, decided without importing torch."""
    cls = type(value)
    return cls.__module__.split(".", 1)[0] == "torch" and hasattr(value, "detach")


def on_accelerator(value: object) -> bool:
    """True for a tensor that numpy cannot read in place (CUDA, MPS, ...): its masks go the device path.

    The one place `associate` asks; tests point it at CPU tensors to run that path here.
    """
    return is_torch_tensor(value) and value.device.type != "cpu"  # type: ignore[attr-defined]


def to_numpy(value: Any, *, name: str) -> npt.NDArray[Any]:
    """A numpy view (or one CPU copy, for a CUDA tensor) of a tensor or array-like."""
    if is_torch_tensor(value):
        tensor = value.detach()
        if tensor.device.type != "cpu":
            tensor = tensor.cpu()
        if str(tensor.dtype) == "torch.bfloat16":  # numpy has no bfloat16; values stay exact in float32
            tensor = tensor.float()
        return tensor.numpy()  # type: ignore[no-any-return]
    try:
        return np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"{name}: expected a torch tensor or a numpy array, got {type(value).__name__}"
        ) from exc


def as_vector(value: Any, *, name: str) -> npt.NDArray[Any]:
    """A 1-D numpy array, or a ValueError naming the argument and its shape."""
    array = to_numpy(value, name=name)
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(array.shape)}")
    return array


def as_int_vector(value: Any, *, name: str) -> IntArray:
    """A 1-D int64 array; float input is accepted only when every value is a whole number.

    PointGroup returns ``torch.tensor([])`` (float32) for zero proposals, and class ids
    may arrive as floats from other models; 2.5 as a class id is a bug worth naming.
    """
    array = as_vector(value, name=name)
    if array.dtype.kind in "iub":
        return array.astype(np.int64, copy=False)
    if array.dtype.kind == "f":
        if array.size and not np.all(np.isfinite(array) & (array == np.round(array))):
            raise ValueError(f"{name} must hold whole numbers, got {array[:5]!r}...")
        return array.astype(np.int64)
    raise TypeError(f"{name} must be an integer array, got dtype {array.dtype}")


def as_index_vector(value: Any, *, name: str) -> npt.NDArray[np.integer[Any]]:
    """A 1-D integer array in its own dtype when that is signed or narrower than 64 bits.

    Per-point arrays (segment, instance, point_index) are the only O(N) inputs besides
    the masks; widening an int32 tensor to int64 would add 8 bytes a point to the
    evaluator's own memory for nothing. Other dtypes go through `as_int_vector`.
    """
    array = as_vector(value, name=name)
    if array.dtype.kind == "i" or (array.dtype.kind == "u" and array.dtype.itemsize < 8):
        return array
    return as_int_vector(array, name=name)


@dataclass(frozen=True)
class SparseMasks:
    """Proposal masks as CSR rows: row ``i`` holds the columns ``indices[offsets[i]:offsets[i+1]]``.

    A row is a set: a column listed twice counts once, as in PointGroup's
    ``proposals_pred[idx] = 1``. ``n_columns`` is N, the width of the dense mask
    this stands for. Memory is the member count, not P×N.
    """

    indices: npt.NDArray[np.integer[Any]]
    offsets: IntArray
    n_columns: int

    def __init__(self, indices: Any, offsets: Any, n_columns: int) -> None:
        idx = as_vector(indices, name="SparseMasks.indices")
        if idx.dtype.kind not in "iu":
            if idx.size == 0:
                idx = idx.astype(np.int64)
            else:
                raise TypeError(f"SparseMasks.indices must be integers, got dtype {idx.dtype}")
        off = as_int_vector(offsets, name="SparseMasks.offsets")
        n_columns = int(n_columns)
        if n_columns < 0:
            raise ValueError(f"SparseMasks.n_columns must be >= 0, got {n_columns}")
        if off.size == 0 or off[0] != 0 or off[-1] != idx.size:
            raise ValueError(
                "SparseMasks.offsets must start at 0 and end at len(indices) "
                f"({idx.size}); got {off[:3]!r}...{off[-3:]!r}"
                if off.size
                else "SparseMasks.offsets must hold at least one entry (0) for zero rows"
            )
        if off.size > 1 and np.any(np.diff(off) < 0):
            raise ValueError("SparseMasks.offsets must not decrease")
        if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= n_columns):
            raise ValueError(
                f"SparseMasks.indices must lie in [0, {n_columns}), got [{int(idx.min())}, {int(idx.max())}]"
            )
        object.__setattr__(self, "indices", idx)
        object.__setattr__(self, "offsets", off)
        object.__setattr__(self, "n_columns", n_columns)

    @property
    def n_rows(self) -> int:
        return int(self.offsets.size - 1)

    @property
    def shape(self) -> tuple[int, int]:
        """``(P, N)``, as the dense mask this stands for."""
        return (self.n_rows, self.n_columns)

    def row(self, i: int) -> npt.NDArray[np.integer[Any]]:
        """Columns of row ``i`` as stored (possibly unsorted, possibly repeated)."""
        return self.indices[self.offsets[i] : self.offsets[i + 1]]

    @classmethod
    def from_dense(cls, masks: Any) -> SparseMasks:
        """Rows of a dense ``[P, N]`` mask (nonzero = member), one row at a time."""
        array = to_numpy(masks, name="masks")
        if array.ndim != 2:
            raise ValueError(f"masks must be 2-D [P, N], got shape {tuple(array.shape)}")
        rows = [np.flatnonzero(array[i]) for i in range(array.shape[0])]
        lengths = np.array([r.size for r in rows], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        indices = np.concatenate(rows) if rows else np.zeros(0, np.int64)
        return cls(indices, offsets, array.shape[1])

    def to_dense(self, dtype: npt.DTypeLike = np.int32) -> npt.NDArray[Any]:
        """The ``[P, N]`` mask this stands for (for tests and debugging: it is P×N)."""
        dense = np.zeros(self.shape, dtype=dtype)
        rows = np.repeat(np.arange(self.n_rows), np.diff(self.offsets))
        dense[rows, self.indices] = 1
        return dense


def sparse_from_device_tensor(masks: Any, *, rows_per_chunk: int = 256) -> SparseMasks:
    """Rows of a dense mask that lives on an accelerator, found there; only member indices come over.

    Copying a CUDA ``[P, N]`` mask to the host would put P×N bytes in the very
    process this package keeps small, so the nonzero search runs on the device in
    chunks of rows and only each row's length and its column indices (int32 where
    N allows) cross to the CPU.
    """
    import torch  # only reached with a torch tensor in hand

    tensor = masks.detach()
    if tensor.ndim != 2:
        raise ValueError(f"dense pred_masks must be 2-D [P, N], got shape {tuple(tensor.shape)}")
    n_rows, n_columns = int(tensor.shape[0]), int(tensor.shape[1])
    narrow = torch.int32 if n_columns < 2**31 else torch.int64
    parts: list[npt.NDArray[np.integer[Any]]] = []
    lengths = np.zeros(n_rows, dtype=np.int64)
    for start in range(0, n_rows, rows_per_chunk):
        chunk = tensor[start : start + rows_per_chunk] != 0  # on the device, as is all of this
        lengths[start : start + chunk.shape[0]] = chunk.sum(dim=1).cpu().numpy()
        # nonzero is row-major: each row's columns, ascending, rows in order. Only they cross.
        parts.append(torch.nonzero(chunk)[:, 1].to(narrow).cpu().numpy())
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    indices = np.concatenate(parts) if parts else np.zeros(0, np.int32)
    return SparseMasks(indices, offsets, n_columns)


def dense_rows(masks: Any) -> tuple[npt.NDArray[Any], int]:
    """A 2-D numpy view of dense masks and the bit mask that means "nonzero" (0: plain ``!= 0``).

    Half-precision floats have no numba or fast numpy comparison; they are read as
    16-bit integers where "nonzero" means any bit other than the sign bit (so -0.0
    is not a member and NaN is, as with ``!= 0``).
    """
    if is_torch_tensor(masks):
        tensor = masks.detach()
        if str(tensor.dtype) in ("torch.bfloat16", "torch.float16"):
            import torch  # only reached with a torch tensor in hand

            tensor = tensor.view(torch.int16)
            array = tensor.cpu().numpy() if tensor.device.type != "cpu" else tensor.numpy()
            return _check_2d(array), 0x7FFF
        if tensor.device.type != "cpu":
            tensor = tensor.cpu()
        return _check_2d(tensor.numpy()), 0
    array = to_numpy(masks, name="pred_masks")
    if array.dtype == np.float16:
        return _check_2d(array.view(np.int16)), 0x7FFF
    if array.dtype.kind not in "biuf":
        raise TypeError(f"pred_masks must be boolean, integer or float, got dtype {array.dtype}")
    return _check_2d(array), 0


def _check_2d(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    if array.ndim != 2:
        raise ValueError(f"dense pred_masks must be 2-D [P, N], got shape {tuple(array.shape)}")
    return array
