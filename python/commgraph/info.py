"""What this commgraph build and machine offer: `python -m commgraph.info`
prints what the `cginfo` tool prints (run it under mpiexec to see every
rank's placement)."""
import sys
from typing import Any

from . import _lib
from .comm import fortran_handle
from .errors import check


def info_text(mpi_comm: Any = None) -> str:
    """cginfo's report over `mpi_comm` (None: MPI's world); collective; the
    text on rank 0, "" elsewhere."""
    if not _lib.has("cg_info_write_fortran"):
        raise RuntimeError("commgraph.info: this libcommgraph has no cg_info_write (built without MPI?)")
    handle = fortran_handle(mpi_comm)
    text, status = _lib.to_text(lambda stream: _lib.lib.cg_info_write_fortran(stream, handle))
    check(status, "commgraph.info")
    return text


def main():
    text = info_text()
    if text:
        sys.stdout.write(text)
        sys.stdout.write(f"python package: {__file__.rsplit('/', 1)[0]}, library {_lib.path}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
