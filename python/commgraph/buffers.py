"""What a buffer argument points at: address, element type, element count,
where it lives, and whether it may be written.

Accepted, in this order: PyTorch tensors (CPU and CUDA, by data_ptr()),
NumPy arrays, objects with __cuda_array_interface__ (CuPy, Numba, ...), with
__array_interface__, and with __dlpack__ (read through the DLPack capsule).
Every buffer must be contiguous (C order): the library moves bytes, not
strides. Element types map to commgraph's: int8, uint8, int32, uint32,
int64, uint64, float16, bfloat16, float32, float64 (bool and complex have no
reduction in commgraph and are refused).
"""
import ctypes
import sys

from . import _lib

HOST = _lib.DEVICE_HOST

# NumPy's typestr (byte order stripped) -> commgraph dtype
_TYPESTR = {"i1": "int8", "u1": "uint8", "i4": "int32", "u4": "uint32", "i8": "int64", "u8": "uint64",
            "f2": "float16", "f4": "float32", "f8": "float64"}
# DLPack (type code, bits) -> commgraph dtype; codes: 0 int, 1 uint, 2 float, 4 bfloat
_DLPACK = {(0, 8): "int8", (1, 8): "uint8", (0, 32): "int32", (1, 32): "uint32", (0, 64): "int64",
           (1, 64): "uint64", (2, 16): "float16", (4, 16): "bfloat16", (2, 32): "float32", (2, 64): "float64"}
_DLPACK_CPU, _DLPACK_CUDA, _DLPACK_CUDA_HOST, _DLPACK_CUDA_MANAGED = 1, 2, 3, 13


class Buffer:
    """A resolved buffer: `ptr` (int), `dtype` (commgraph name), `count`
    (elements), `device` (HOST or a CUDA ordinal; None: on some GPU, the
    object did not say which), `readonly`, and `owner`, the object that keeps
    the memory alive (graphs and plans hold it)."""

    __slots__ = ("ptr", "dtype", "count", "device", "readonly", "owner")

    def __init__(self, ptr, dtype, count, device, readonly, owner):
        self.ptr, self.dtype, self.count, self.device, self.readonly, self.owner = (
            ptr, dtype, count, device, readonly, owner)

    @property
    def nbytes(self) -> int:
        """count times the element size."""
        return self.count * _lib.lib.cg_dtype_size(_lib.DTYPES.index(self.dtype))

    def __repr__(self) -> str:
        where = "host" if self.device == HOST else f"cuda:{'?' if self.device is None else self.device}"
        return f"<commgraph buffer {self.count} x {self.dtype} at {self.ptr:#x} on {where}>"


def _contiguous(shape, strides, itemsize):
    if strides is None:
        return True
    expected = itemsize
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent != 1 and stride != expected:
            return False
        expected *= extent
    return True


def _product(shape):
    n = 1
    for extent in shape:
        n *= int(extent)
    return n


def _from_torch(t):
    torch = sys.modules["torch"]
    names = {torch.int8: "int8", torch.uint8: "uint8", torch.int32: "int32", torch.int64: "int64",
             torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32",
             torch.float64: "float64"}
    for name in ("uint32", "uint64"):
        if hasattr(torch, name):
            names[getattr(torch, name)] = name
    if t.dtype not in names:
        raise TypeError(f"commgraph: a tensor of {t.dtype} has no commgraph type (int8..uint64, float16, "
                        "bfloat16, float32, float64)")
    if not t.is_contiguous():
        raise ValueError("commgraph: the tensor is not contiguous; pass t.contiguous() (and keep it)")
    if t.device.type == "cuda":
        device = t.device.index if t.device.index is not None else torch.cuda.current_device()
    elif t.device.type == "cpu":
        device = HOST
    else:
        raise TypeError(f"commgraph: tensors on {t.device.type} are not supported (cpu and cuda are)")
    return Buffer(t.data_ptr(), names[t.dtype], t.numel(), device, False, t)


def _typestr_dtype(typestr, what):
    key = typestr[1:] if typestr[:1] in "<>|=" else typestr
    if typestr[:1] == ">" and key not in ("i1", "u1"):
        raise ValueError(f"commgraph: {what} is big-endian ({typestr}); only native byte order is supported")
    if key not in _TYPESTR:
        raise TypeError(f"commgraph: {what} has element type {typestr!r}, which has no commgraph type (int8..uint64, "
                        "float16, float32, float64; bfloat16 through PyTorch or DLPack)")
    return _TYPESTR[key]


def _from_interface(obj, interface, device):
    dtype = _typestr_dtype(interface["typestr"], type(obj).__name__)
    shape = tuple(interface["shape"])
    itemsize = int(interface["typestr"][2:])
    if not _contiguous(shape, interface.get("strides"), itemsize):
        raise ValueError(f"commgraph: the {type(obj).__name__} is not contiguous (C order)")
    data = interface.get("data")
    if not isinstance(data, tuple) or len(data) != 2:
        raise TypeError(f"commgraph: the {type(obj).__name__}'s array interface has no (address, readonly) data "
                        "(buffer-protocol data is not supported: pass a NumPy array)")
    ptr, readonly = data
    offset = int(interface.get("offset", 0) or 0)
    return Buffer(int(ptr or 0) + offset, dtype, _product(shape), device, bool(readonly), obj)


def _from_numpy(a):
    if not a.flags["C_CONTIGUOUS"]:
        raise ValueError("commgraph: the NumPy array is not C-contiguous; pass numpy.ascontiguousarray(a) and keep it")
    dtype = _typestr_dtype(a.dtype.str, "the NumPy array")
    return Buffer(a.ctypes.data, dtype, a.size, HOST, not a.flags["WRITEABLE"], a)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _from_dlpack(obj):
    capsule = obj.__dlpack__()
    # a DLManagedTensor begins with its DLTensor; the capsule keeps it alive
    tensor = _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    key = (tensor.dtype.code, tensor.dtype.bits)
    if key not in _DLPACK or tensor.dtype.lanes != 1:
        raise TypeError(f"commgraph: DLPack type code {tensor.dtype.code}, {tensor.dtype.bits} bits, "
                        f"{tensor.dtype.lanes} lanes has no commgraph type")
    shape = [tensor.shape[i] for i in range(tensor.ndim)]
    strides = [tensor.strides[i] for i in range(tensor.ndim)] if tensor.strides else None
    if strides is not None and not _contiguous(shape, strides, 1):  # DLPack strides count elements
        raise ValueError(f"commgraph: the {type(obj).__name__} is not contiguous (C order)")
    kind = tensor.device.device_type
    if kind in (_DLPACK_CPU, _DLPACK_CUDA_HOST):
        device = HOST
    elif kind in (_DLPACK_CUDA, _DLPACK_CUDA_MANAGED):
        device = tensor.device.device_id
    else:
        raise TypeError(f"commgraph: DLPack device type {kind} is not supported (CPU, CUDA, CUDA host, managed)")
    return Buffer((tensor.data or 0) + tensor.byte_offset, _DLPACK[key], _product(shape), device, False,
                  (obj, capsule))


def resolve(obj: object, what: str = "buffer") -> Buffer:
    """The Buffer behind `obj`; TypeError for what is no buffer."""
    if isinstance(obj, Buffer):
        return obj
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        return _from_torch(obj)
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(obj, numpy.ndarray):
        return _from_numpy(obj)
    if hasattr(obj, "__cuda_array_interface__"):
        return _from_interface(obj, obj.__cuda_array_interface__, None)
    if hasattr(obj, "__array_interface__"):
        return _from_interface(obj, obj.__array_interface__, HOST)
    if hasattr(obj, "__dlpack__"):
        return _from_dlpack(obj)
    raise TypeError(f"commgraph: the {what} is a {type(obj).__name__}, not a buffer (a NumPy array, a PyTorch "
                    "tensor, or an object with __dlpack__, __cuda_array_interface__ or __array_interface__)")
