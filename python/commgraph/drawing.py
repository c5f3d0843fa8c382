"""Drawings of graphs and plans: their DOT (cg_graph_write_dot,
cg_plan_write_dot) written to a file, and rendered to SVG by Graphviz's
`dot` program (found on PATH; Debian: graphviz) for files, web pages and
notebooks, where a Graph or Plan shown as a cell's value draws itself."""
import os
import shutil
import subprocess
from typing import IO, Optional, Union

Target = Union[str, "os.PathLike[str]", IO[str]]


def _write(text: str, target: Target) -> None:
    if hasattr(target, "write"):
        target.write(text)  # type: ignore[union-attr]
        return
    with open(target, "w", encoding="utf-8") as f:  # type: ignore[arg-type]
        f.write(text)


def dot_program() -> Optional[str]:
    """The path of Graphviz's `dot`, or None where it is not installed."""
    return shutil.which("dot")


def render_svg(dot: str, timeout: float = 60.0) -> str:
    """DOT text as SVG through `dot -Tsvg`. FileNotFoundError without
    Graphviz, RuntimeError with dot's message when it refuses the text,
    subprocess.TimeoutExpired after `timeout` seconds."""
    program = dot_program()
    if program is None:
        raise FileNotFoundError("commgraph: drawing SVG needs Graphviz's dot on PATH (Debian: apt install graphviz); "
                                "the DOT text itself is what .dot() returns")
    done = subprocess.run([program, "-Tsvg"], input=dot.encode(), capture_output=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"commgraph: dot -Tsvg failed ({done.returncode}): "
                           f"{done.stderr.decode(errors='replace').strip()}")
    return done.stdout.decode()


class Drawable:
    """What a Graph and a Plan share: `.dot()` (theirs) to a file, to SVG."""

    def dot(self) -> str:  # pragma: no cover -- Graph and Plan define it
        raise NotImplementedError

    def write_dot(self, target: Target) -> None:
        """Writes `.dot()` to a path or an open text file."""
        _write(self.dot(), target)

    def svg(self, timeout: float = 60.0) -> str:
        """The drawing as SVG text (Graphviz's dot; see render_svg)."""
        return render_svg(self.dot(), timeout)

    def write_svg(self, target: Target, timeout: float = 60.0) -> None:
        """Writes `.svg()` to a path or an open text file."""
        _write(self.svg(timeout), target)

    def _repr_svg_(self) -> Optional[str]:
        """Jupyter's drawing of the object: None (text instead) where dot is
        missing or the object closed."""
        if dot_program() is None or not getattr(self, "_handle", None):
            return None
        return self.svg()
