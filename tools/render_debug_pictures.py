"""Regenerate the pictures in docs/ that hccl_py's own tools draw (layout strips and timelines).

    python tools/render_debug_pictures.py

Runs the samples on 4 emulated ranks with ``python -m hccl_py layout`` and
``run --trace``, then draws the timelines with hccl_py.trace.timeline.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMG = ROOT / "docs" / "img"


def _cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "hccl_py", *args], cwd=ROOT, check=False,
                   capture_output=True)  # fmt: skip


def main() -> None:
    from hccl_py.trace.timeline import draw_timeline

    IMG.mkdir(parents=True, exist_ok=True)
    sample = "samples/debug_stride_mistake.py"
    layouts = [
        ("layout-allgather-multiround.png", [sample, "--fixed"]),
        ("layout-allgather-stride-mistake.png", [sample]),
        ("layout-alltoallv.png", ["--platform", "A3", "samples/alltoallv_custom.py"]),
        ("layout-reducescatter-send-mistake.png", ["samples/debug_send_stride_mistake.py"]),
        (
            "layout-reducescatter-send-fixed.png",
            ["samples/debug_send_stride_mistake.py", "--fixed"],
        ),
    ]
    for png, args in layouts:
        *options, script = args[:-1] if args[-1] == "--fixed" else args
        extra = args[-1:] if args[-1] == "--fixed" else []
        _cli("layout", "-n", "4", "--png", str(IMG / png), *options, script, *extra)
    with tempfile.TemporaryDirectory() as tmp:
        for name, extra in (("stride-mistake", ()), ("fixed", ("--fixed",))):
            trace = Path(tmp) / f"{name}.json"
            _cli("run", "-n", "4", "--trace", str(trace), sample, *extra)
            if not trace.exists():
                raise SystemExit(f"no trace was written for {sample} {' '.join(extra)}")
            draw_timeline(trace, IMG / f"timeline-{name}.png", title=f"{sample} ({name})")


if __name__ == "__main__":
    main()
