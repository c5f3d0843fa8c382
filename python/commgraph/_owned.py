"""What the package's objects over C handles share: the handle (ValueError
once closed), close() (the C destroy, once), with-blocks, and the end of
the program (_registry: what is still open is closed, newest first)."""
import ctypes
from typing import Any, Optional

from . import _lib, _registry


class Owned:
    """Closed by the program, or at exit: its destroy is collective, so an
    object the program drops unclosed is kept open until then (closed in
    the same order on every rank) instead of being freed by Python's
    garbage collection, whose order differs between ranks."""

    _what = "object"  # for the closed-handle error
    _destroy = ""  # the C function that frees the handle
    _handle: Optional[ctypes.c_void_p] = None
    _key: Optional[int] = None

    def _own(self, handle: ctypes.c_void_p) -> None:
        self._handle = handle
        self._key = _registry.track(self, keep=not isinstance(self, Collected))

    @property
    def handle(self) -> ctypes.c_void_p:
        """The C handle; ValueError once closed."""
        if not self._handle:
            raise ValueError(f"commgraph: the {self._what} is closed")
        return self._handle

    def close(self) -> None:
        """Frees the C object (once)."""
        if self._handle:
            getattr(_lib.lib, self._destroy)(self._handle)
            self._handle = None
            if self._key is not None:
                _registry.untrack(self._key)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Collected(Owned):
    """An Owned whose destroy is local (no other rank takes part): freed when
    Python collects it too."""

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 -- interpreter shutdown
            pass
