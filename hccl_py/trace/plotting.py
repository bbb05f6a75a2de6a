"""matplotlib for hccl_py's pictures (an optional extra), loaded on first use.

The benchmark's plot, the layout picture and the timeline all draw with
matplotlib's headless backend; without it, asking for a PNG names the extra
to install (the text views never need it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core.newfile import create_new


def pyplot(what: str) -> Any:
    """``matplotlib.pyplot`` on the Agg backend; RuntimeError naming the extra when it is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise RuntimeError(f"{what} needs matplotlib: pip install 'hccl_py[bench]'") from exc
    return plt


def patch(label: str, **style: Any) -> Any:
    """A legend entry: a square drawn with ``style`` (``color=``, ``hatch=`` ...) and ``label``."""
    from matplotlib.patches import Patch

    return Patch(label=label, **style)


def save(fig: Any, path: str | Path, dpi: int = 90) -> None:
    """Lay out, write ``fig`` to ``path`` (creating its folder) and release it."""
    plt = pyplot("saving a figure")
    fig.tight_layout()
    try:
        with create_new(path, "picture") as f:  # a failed savefig leaves no file
            fig.savefig(f, dpi=dpi, format=Path(path).suffix[1:] or "png")
    finally:
        plt.close(fig)


def drawable(path: str) -> str | None:
    """Why hccl_py cannot draw a picture to ``path`` (its suffix), or None."""
    from matplotlib.backend_bases import FigureCanvasBase

    kinds = sorted(_NATIVE & set(FigureCanvasBase.get_supported_filetypes()))
    suffix = Path(path).suffix[1:].lower() or "png"
    if suffix in kinds:
        return None
    return f"hccl_py draws no {suffix!r} files; end the path in one of {kinds}"


#: Formats matplotlib writes without an outside program (pgf needs LaTeX).
_NATIVE = {
    "eps",
    "jpeg",
    "jpg",
    "pdf",
    "png",
    "ps",
    "raw",
    "rgba",
    "svg",
    "svgz",
    "tif",
    "tiff",
    "webp",
}
