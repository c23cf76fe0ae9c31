"""The repository's scripts (examples, benchmarks, documentation extensions) loaded as modules."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_script(relative_path: str, name: str | None = None):
    """The module of the script at ``relative_path`` (from the repository's root), run once
    under ``name`` (default: its file name)."""
    path = ROOT / relative_path
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
