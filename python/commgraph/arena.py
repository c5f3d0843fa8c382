"""Arenas: tensors placed back to back, so that fused collectives over them
need no copies (docs/fusion.md). A host arena hands out NumPy arrays, a
device arena PyTorch tensors (param.grad can live in one)."""
import ctypes
import sys
from typing import Any, Optional, Tuple

from . import _lib
from ._owned import Collected
from .errors import UnsupportedError, check

_lib_ = _lib.lib

_TYPESTR = {"int8": "|i1", "uint8": "|u1", "int32": "<i4", "uint32": "<u4", "int64": "<i8", "uint64": "<u8",
            "float16": "<f2", "float32": "<f4", "float64": "<f8", "bfloat16": "<i2"}


def _dtype_name(dtype):
    """commgraph's name for a dtype given as a name, a NumPy dtype or a torch.dtype."""
    if isinstance(dtype, str):
        name = dtype
    else:
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(dtype, torch.dtype):
            name = str(dtype).replace("torch.", "")
        else:
            name = getattr(dtype, "name", None) or getattr(dtype, "__name__", str(dtype))
    if name not in _lib.DTYPES:
        raise TypeError(f"commgraph: dtype {dtype!r} has no commgraph type ({', '.join(_lib.DTYPES)})")
    return name


class _DevicePiece:
    """A piece of a device arena, as __cuda_array_interface__ (it keeps the arena alive)."""

    def __init__(self, arena, ptr, shape, typestr):
        self._arena = arena
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": shape, "typestr": typestr,
                                         "strides": None, "version": 2}


class Arena(Collected):
    """Arena(capacity_bytes, device=None, alignment=0, symmetric=None):
    `capacity_bytes` of host memory (device None) or of a CUDA device's
    memory (an ordinal or a torch.device). empty(shape, dtype) hands out the
    next piece; pieces touch (each aligned to its element size, or to
    `alignment`). Close it only after the plans over it; it is freed when
    collected, which no piece lets happen before it goes.

    symmetric: a Comm of the NCCL backend: the memory is NCCL symmetric
    memory on that communicator's device (cg_nccl_arena_create,
    docs/gpu.md#symmetric-memory), so plans' collectives over its pieces can
    take NCCL's symmetric kernels. Collective over the communicator's ranks,
    and so is closing it: make the same arenas and pieces in the same order
    on every rank."""

    _what, _destroy = "arena", "cg_arena_destroy"

    def __init__(self, capacity_bytes: int, device: Any = None, alignment: int = 0,
                 symmetric: Optional[Any] = None) -> None:
        from .comm import Comm, _device_of
        if device == "local_rank":
            raise ValueError("commgraph: an arena needs a device ordinal (comm.device), not 'local_rank'")
        ordinal = _device_of(device)
        if symmetric is not None:
            if not isinstance(symmetric, Comm):
                raise TypeError(f"commgraph.Arena: symmetric must be a commgraph.Comm, not {type(symmetric).__name__}")
            if not _lib.has("cg_nccl_arena_create"):
                raise UnsupportedError("commgraph.Arena: this libcommgraph was built without NCCL (symmetric memory)")
            if ordinal == _lib.DEVICE_HOST and symmetric.device is not None:
                ordinal = symmetric.device
        self.device = None if ordinal == _lib.DEVICE_HOST else ordinal
        opts = _lib.ArenaOpts(ctypes.sizeof(_lib.ArenaOpts),
                              _lib.DEVICE_HOST if self.device is None else self.device, int(alignment))
        out = ctypes.c_void_p()
        if symmetric is not None:
            check(_lib_.cg_nccl_arena_create(ctypes.byref(out), symmetric.handle, int(capacity_bytes),
                                             ctypes.byref(opts)), "commgraph.Arena")
        else:
            check(_lib_.cg_arena_create(ctypes.byref(out), int(capacity_bytes), ctypes.byref(opts)),
                  "commgraph.Arena")
        self._own(out)

    def empty(self, shape: Any, dtype: Any = "float32") -> Any:
        """The next piece: a NumPy array (host arena) or a PyTorch tensor on
        the arena's device, uninitialized, of `shape` and `dtype`."""
        shape = (int(shape),) if isinstance(shape, int) else tuple(int(n) for n in shape)
        name = _dtype_name(dtype)
        count = 1
        for n in shape:
            count *= n
        torch = sys.modules.get("torch")
        if self.device is None and name == "bfloat16":
            raise TypeError("commgraph: NumPy has no bfloat16; use a device arena with PyTorch")
        if self.device is not None and torch is None:
            raise RuntimeError("commgraph: a device arena hands out PyTorch tensors: import torch first")
        numpy = __import__("numpy") if self.device is None else None  # ImportError before the piece is taken
        ptr = ctypes.c_void_p()
        check(_lib_.cg_arena_alloc(ctypes.byref(ptr), self.handle, count, _lib.DTYPES.index(name)),
              "commgraph.Arena.empty")
        address = ptr.value or 0
        if numpy is not None:
            raw = (ctypes.c_byte * (count * _lib_.cg_dtype_size(_lib.DTYPES.index(name)))).from_address(address)
            array = numpy.frombuffer(raw, dtype=numpy.dtype(_TYPESTR[name])).reshape(shape)
            raw._arena = self  # numpy keeps `raw`, which keeps the arena
            return array
        piece = _DevicePiece(self, address, shape, _TYPESTR[name])
        tensor = torch.as_tensor(piece, device=torch.device("cuda", self.device))
        return tensor.view(torch.bfloat16) if name == "bfloat16" else tensor

    @property
    def usage(self) -> Tuple[int, int]:
        """(bytes handed out, capacity)."""
        used, capacity = ctypes.c_size_t(), ctypes.c_size_t()
        check(_lib_.cg_arena_usage(ctypes.byref(used), ctypes.byref(capacity), self.handle))
        return used.value, capacity.value

    def symmetric_max(self, dtype: Any = "float32") -> int:
        """A symmetric arena's cut-over (cg_nccl_arena_symmetric_max): the
        largest allreduce in bytes of `dtype` that takes NCCL's symmetric
        kernels; larger ones take the plain kernels on the same memory.
        UnsupportedError for an arena not made with `symmetric=`."""
        name = _dtype_name(dtype)
        if not _lib.has("cg_nccl_arena_symmetric_max"):
            raise UnsupportedError("commgraph.Arena.symmetric_max: this libcommgraph was built without NCCL")
        out = ctypes.c_size_t()
        check(_lib_.cg_nccl_arena_symmetric_max(ctypes.byref(out), self.handle, _lib.DTYPES.index(name)),
              "commgraph.Arena.symmetric_max")
        return out.value

    def reset(self) -> None:
        """Forgets every piece (the memory is handed out again from the start)."""
        check(_lib_.cg_arena_reset(self.handle), "commgraph.Arena.reset")
