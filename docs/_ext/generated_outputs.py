"""Outputs shown in the documentation, generated when it is built.

A page shows what the code on it prints only if the build runs that code: before reading the
sources, this extension runs each script of ``generated_outputs`` and writes what it prints to
``docs/_generated/<name>.txt``, which the pages include (``literalinclude``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def _generate(app):
    root = Path(app.confdir).parent
    target = Path(app.confdir) / "_generated"
    target.mkdir(exist_ok=True)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    for name, command in app.config.generated_outputs.items():
        done = subprocess.run([sys.executable, *command], cwd=root, env=env, check=True,
                              capture_output=True, text=True)
        (target / f"{name}.txt").write_text(done.stdout)


def setup(app):
    app.add_config_value("generated_outputs", {}, "env")
    app.connect("builder-inited", _generate)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
