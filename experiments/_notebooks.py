"""Run the study's notebooks headless on a results directory (CI and ``report`` use this).

The notebooks under ``notebooks/`` are thin: they read ``$EXPERIMENTS_RESULTS`` (default
``results/quick`` under the repository root), load the JSON results and draw them with
``experiments`` (its ``plot_*`` functions). They are committed without outputs; executed
copies go elsewhere.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["NOTEBOOKS", "execute_notebooks", "repo_root"]

NOTEBOOKS: tuple[str, ...] = ("saturation.ipynb", "evaluation.ipynb")
RESULTS_ENV = "EXPERIMENTS_RESULTS"


def repo_root(start: str | Path | None = None) -> Path:
    """The nearest directory at or above ``start`` (default: this file) holding pyproject.toml."""
    here = Path(start if start is not None else __file__).resolve()
    for directory in (here, *here.parents):
        if (directory / "pyproject.toml").is_file():
            return directory
    raise FileNotFoundError(f"no pyproject.toml at or above {here}")


@contextmanager
def _env(name: str, value: str) -> Iterator[None]:
    """Set an environment variable for the duration, restoring the old value after.

    The kernel is a child process and inherits this process's environment when it starts;
    there is no other channel to hand it the results directory without editing the notebook.
    """
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def execute_notebooks(
    results_dir: str | Path,
    out_dir: str | Path,
    *,
    notebooks_dir: str | Path | None = None,
    timeout: int = 600,
) -> list[Path]:
    """Execute each of :data:`NOTEBOOKS` on ``results_dir``; write executed copies to ``out_dir``.

    The kernel ("python3") starts in the repository root with ``$EXPERIMENTS_RESULTS`` set to
    the absolute ``results_dir``. ``timeout`` is per cell, in seconds. A failing cell raises
    RuntimeError naming the notebook (the executed copy, error included, is still written).
    Returns the executed copies' paths in :data:`NOTEBOOKS` order.
    """
    # Imported here: only this function needs the notebook machinery (the [experiments] extra).
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    root = repo_root()
    source_dir = Path(notebooks_dir) if notebooks_dir is not None else root / "notebooks"
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with _env(RESULTS_ENV, str(Path(results_dir).resolve())):
        for name in NOTEBOOKS:
            nb = nbformat.read(source_dir / name, as_version=4)  # type: ignore[no-untyped-call]
            client = NotebookClient(
                nb,
                timeout=timeout,
                kernel_name="python3",
                resources={"metadata": {"path": str(root)}},
            )
            target = out / name
            try:
                client.execute()
            except CellExecutionError as exc:
                # Keep the evidence (the traceback in its cell) next to the good copies.
                nbformat.write(nb, target)  # type: ignore[no-untyped-call]
                raise RuntimeError(
                    f"notebook {name} failed (executed copy: {target}):\n{exc}"
                ) from exc
            nbformat.write(nb, target)  # type: ignore[no-untyped-call]
            written.append(target)
    return written
