"""The end of the program: what is still open is closed newest first (plans
before the graphs and communicators they use, as on every rank alike, since
destroying a communicator is collective), then MPI is finalized if the
package initialized it."""
import atexit
import itertools
import threading
import weakref

_lock = threading.RLock()  # reentrant: a collection inside track() may close (untrack) another object
_serial = itertools.count()
_open = {}  # serial -> weak reference
_finally = []


def track(obj, keep=False):
    """Remembers `obj` (with a close() method) until it is collected, or
    with keep=True until untrack(): an object whose destroy is collective
    (a communicator) cannot follow garbage collection, which differs between
    ranks, so one the program drops unclosed stays open until exit. Returns
    the key for untrack()."""
    with _lock:
        key = next(_serial)
        if keep:
            _open[key] = lambda obj=obj: obj
        else:
            _open[key] = weakref.ref(obj, lambda _ref, key=key: _open.pop(key, None))
    return key


def untrack(key):
    """Forgets a closed object."""
    with _lock:
        _open.pop(key, None)


def at_exit(fn):
    """Runs fn() at exit, after every tracked object is closed."""
    _finally.append(fn)


@atexit.register
def _close_all():
    with _lock:
        # .get: a collection on another thread may drop an entry meanwhile
        refs = [_open.get(key) for key in sorted(_open, reverse=True)]
    for ref in refs:
        obj = ref() if ref is not None else None
        if obj is not None:
            obj.close()
    for fn in reversed(_finally):
        fn()
