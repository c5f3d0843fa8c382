"""Communicators: over an mpi4py communicator, MPI's world, or offline."""
import ctypes
import sys
import threading

from typing import Any, Optional

from . import _lib
from ._owned import Owned
from .errors import InvalidArgumentError, UnsupportedError, check

_lib_ = _lib.lib
_mpi_lock = threading.Lock()
_mpi_started = False


def _need_mpi(what: str) -> None:
    if not _lib.has("cg_mpi_init"):
        raise UnsupportedError(f"{what}: this libcommgraph was built without MPI (or is older than the Python "
                               "package)")


def init_mpi() -> int:
    """Initializes MPI with MPI_THREAD_MULTIPLE unless it is initialized (by
    mpi4py, say); returns the thread level MPI provides (MPI_THREAD_* value).
    MPI is then finalized at exit, after every object the package made."""
    global _mpi_started
    _need_mpi("commgraph.init_mpi")
    with _mpi_lock:
        provided = ctypes.c_int()
        check(_lib_.cg_mpi_init(ctypes.byref(provided)), "commgraph.init_mpi")
        if not _mpi_started:
            _mpi_started = True
            from . import _registry
            _registry.at_exit(lambda: _lib_.cg_mpi_finalize())
        return provided.value


def mpi_library_version() -> str:
    """The first line of the MPI library's version, as libcommgraph is linked."""
    _need_mpi("commgraph.mpi_library_version")
    buf = ctypes.create_string_buffer(1024)
    check(_lib_.cg_mpi_library_version(buf, len(buf)), "commgraph.mpi_library_version")
    return buf.value.decode("utf-8", "replace")


def _vendor(text):
    for name in ("Open MPI", "MPICH", "Intel", "MVAPICH", "Cray"):
        if name.lower() in text.lower():
            return name
    return text.split()[0] if text else "?"


def fortran_handle(mpi_comm: Any) -> int:
    """The Fortran handle of `mpi_comm` (an mpi4py communicator, an int
    handle, or None: MPI's world, initializing MPI if needed)."""
    if mpi_comm is None:
        init_mpi()
        return _lib_.cg_mpi_world_fortran()
    if isinstance(mpi_comm, int):
        return mpi_comm
    if hasattr(mpi_comm, "py2f"):
        mpi4py = sys.modules.get("mpi4py.MPI")
        if mpi4py is not None:
            theirs, ours = mpi4py.Get_library_version(), mpi_library_version()
            if _vendor(theirs) != _vendor(ours):
                raise InvalidArgumentError(f"commgraph: mpi4py runs on {theirs.splitlines()[0]!r} but libcommgraph "
                                           f"on {ours!r}: one process cannot use two MPI libraries; install an "
                                           "mpi4py built on the same MPI, or pass no communicator (MPI's world)")
        return mpi_comm.py2f()
    raise TypeError(f"commgraph: mpi_comm is a {type(mpi_comm).__name__}; pass an mpi4py communicator, a Fortran "
                    "handle (int) or None for MPI's world")


def _device_of(device):
    if device is None or device == "host":
        return _lib.DEVICE_HOST
    if device == "local_rank":
        return _lib.DEVICE_LOCAL_RANK
    if isinstance(device, int) and not isinstance(device, bool) and device >= 0:
        return device
    index = getattr(device, "index", None)  # torch.device("cuda", n)
    if getattr(device, "type", None) == "cuda":
        if index is None:
            torch = sys.modules["torch"]
            index = torch.cuda.current_device()
        return index
    raise ValueError(f"commgraph: device {device!r}: pass None or 'host', 'local_rank', a CUDA ordinal, or a "
                     "torch.device('cuda', n)")


def _enum(value, names, what):
    if value not in names:
        raise ValueError(f"commgraph: {what} {value!r}; one of {', '.join(names)}")
    return names.index(value)


class Comm(Owned):
    """A commgraph communicator.

    Comm(mpi_comm=None, *, backend="auto", device=None, staging="auto",
         chunk_bytes=None, timeout=0.0)

    mpi_comm: an mpi4py communicator (built on the MPI libcommgraph uses),
    a Fortran handle, or None for MPI's world (MPI is initialized with
    MPI_THREAD_MULTIPLE if nobody did). device: None or "host" for host
    buffers, a CUDA ordinal, "local_rank" (the GPU of this rank's local
    rank), or a torch.device. backend: "auto", "mpi", "nccl",
    "hosttransfer". staging, chunk_bytes: MPI on device buffers
    (docs/staged.md). timeout: seconds to wait for the other ranks (0: CG_TIMEOUT, else for
    ever). chunk_bytes: None (the library's default, CG_CHUNK_BYTES),
    "never" (messages are not cut), or a number of bytes. Collective over
    the MPI communicator, as is close() once the last graph and plan using
    the communicator are gone: close communicators in the same order on
    every rank, or leave them to the end of the program, which closes what
    is still open, newest first (a dropped Comm is not closed before)."""

    _what, _destroy = "communicator", "cg_comm_destroy"

    def __init__(self, mpi_comm: Any = None, *, backend: str = "auto", device: Any = None, staging: str = "auto",
                 chunk_bytes: Any = None, timeout: float = 0.0, _handle: Optional[ctypes.c_void_p] = None) -> None:
        if _handle is None:
            _need_mpi("commgraph.Comm")
            opts = _lib.CommOpts(ctypes.sizeof(_lib.CommOpts), _enum(backend, _lib.BACKENDS, "backend"),
                                 _device_of(device), _enum(staging, _lib.STAGINGS, "staging"),
                                 _chunk(chunk_bytes), float(timeout))
            handle = fortran_handle(mpi_comm)
            out = ctypes.c_void_p()
            check(_lib_.cg_comm_create_fortran(ctypes.byref(out), handle, ctypes.byref(opts)), "commgraph.Comm")
            _handle = out
        self._own(_handle)

    @classmethod
    def offline(cls, rank: int, size: int) -> "Comm":
        """A communicator of `size` ranks seen from `rank`, with no transport
        (graphs can be recorded and checked, not run)."""
        out = ctypes.c_void_p()
        check(_lib_.cg_comm_create_offline(ctypes.byref(out), int(rank), int(size)), "commgraph.Comm.offline")
        return cls(_handle=out)

    def _int(self, fn):
        out = ctypes.c_int()
        check(fn(ctypes.byref(out), self.handle))
        return out.value

    @property
    def rank(self) -> int:
        """This rank in the communicator."""
        return self._int(_lib_.cg_comm_rank)

    @property
    def size(self) -> int:
        """How many ranks the communicator has."""
        return self._int(_lib_.cg_comm_size)

    @property
    def backend(self) -> str:
        """"mpi", "nccl", "mpi-staged", "hosttransfer" or "offline"."""
        out = ctypes.c_char_p()
        check(_lib_.cg_comm_backend_name(ctypes.byref(out), self.handle))
        return out.value.decode()

    @property
    def device(self) -> Optional[int]:
        """None for host buffers, else the CUDA ordinal."""
        device = self._int(_lib_.cg_comm_device)
        return None if device == _lib.DEVICE_HOST else device

    def __repr__(self):
        if not self._handle:
            return "<commgraph.Comm closed>"
        return f"<commgraph.Comm rank {self.rank} of {self.size}, {self.backend}>"


def _chunk(chunk_bytes: Any) -> int:
    if chunk_bytes is None:
        return _lib.CHUNK_DEFAULT
    if chunk_bytes == "never":
        return _lib.CHUNK_NONE
    if isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, int) or chunk_bytes <= 0:
        raise ValueError(f"commgraph: chunk_bytes {chunk_bytes!r}: None (the default), 'never' or a positive number "
                         "of bytes")
    return chunk_bytes
