"""Checkpoints: a long run's finished work, saved atomically and reloaded only by the same run.

Two stores share one key check and one atomic write: :class:`StateFile` pickles an estimator's
state after every finished stage (``thermodynamic``), :class:`ResultDirectory` keeps one netCDF
result per finished model (``compare``). A checkpoint is tied to a *key* (a JSON-able dict of
everything that determines the run: settings, model, seed) and to :data:`FORMAT`, bumped whenever
what a checkpoint holds changes, so that neither another run nor another version resumes from it.
"""

from __future__ import annotations

import json
import os
import pickle
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

__all__ = ["FORMAT", "StateFile", "ResultDirectory", "run_key"]

#: 3: results typed per method, plumbing shared by every estimator; 4: nested's alignment
#: reference is part of its state. (Thermodynamic's tempering from a found mode is a part that
#: older checkpoints lack, and a run resumed from one starts that part afresh: no new format.)
#: 5: nested's slice moves on MLPs stay in the aligned copy (finished runs made with the
#: averaged directions ran low on the robot arm and must not be pooled with new ones).
FORMAT = 5

_OLDER = ("was written by an older version of pymc-evidence; delete it or pass another "
          "checkpoint path")


def run_key(settings: dict, density, random_seed) -> dict:
    """What determines an estimator's run: its settings, the model's parameters and the seed
    (a Generator passed as the seed cannot be told apart from another: only its kind counts)."""
    seed = random_seed if isinstance(random_seed, (int, np.integer, type(None))) else "generator"
    return {"settings": settings, "names": density.names, "dim": density.dim,
            "model": density.model.name, "seed": None if seed is None else str(seed)}


def _atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """``write`` to a temporary file beside ``path``, then replace ``path`` with it: a run
    stopped mid-save leaves the previous checkpoint whole."""
    temporary = path.with_name(path.name + ".tmp")
    write(temporary)
    os.replace(temporary, path)


def _canonical(key: dict) -> str:
    return json.dumps(key, sort_keys=True, default=str)


def _other_run(saved: str, current: str) -> str:
    """The refusal of a checkpoint whose key differs, naming what differs (a default that
    changed between versions looks to a user like the same call)."""
    saved, current = json.loads(saved), json.loads(current)

    def flat(key):  # the settings beside the model's and the seed's fields (the seed once)
        settings = key.pop("settings", {})
        if "random_seed" in settings:
            key.pop("seed", None)
        return {**key, **settings}

    old, new = flat(saved), flat(current)
    differs = [f"{name}: {old.get(name)!r} in the checkpoint, {new.get(name)!r} now"
               for name in sorted(set(old) | set(new)) if old.get(name) != new.get(name)]
    return ("was written by a run with other settings or another model ("
            + "; ".join(differs) + "); to resume it, pass the checkpoint's settings "
            "explicitly where they are arguments (the others follow from the model and the "
            "package version), or delete it or pass another checkpoint path")


class StateFile:
    """An estimator's state after its last finished stage, with the sampling seconds so far.

    ``earlier`` holds the sampling seconds of the sessions before this one once loaded, so a
    resumed run's timing counts every session; ``state`` the last state loaded or saved (None
    before either), so that a later part of the run can save beside it.
    """

    def __init__(self, path, key: dict):
        self.path = None if path is None else Path(path)
        self.key = _canonical(key)
        self.earlier = 0.0
        self.started = time.perf_counter()
        self.state = None
        self._saved_here = False

    def load(self):
        """The saved state, or None when there is no checkpoint yet."""
        if self.path is None or not self.path.exists():
            return None
        with open(self.path, "rb") as file:
            try:
                saved = pickle.load(file)
            except (TypeError, AttributeError, EOFError, ModuleNotFoundError,
                    pickle.UnpicklingError) as err:
                raise ValueError(
                    f"checkpoint {self.path} cannot be read ({err}): it was written by another "
                    "version of pymc-evidence, or is damaged; delete it or pass another "
                    "checkpoint path"
                ) from err
        if not isinstance(saved, dict) or saved.get("format") != FORMAT:
            raise ValueError(f"checkpoint {self.path} {_OLDER}")
        if saved["key"] != self.key:
            raise ValueError(f"checkpoint {self.path} {_other_run(saved['key'], self.key)}")
        self.earlier = saved["sampling_seconds"]
        self.state = saved["state"]
        return self.state

    def save(self, state) -> None:
        """Save ``state`` with the sampling seconds so far (this session's since it began)."""
        self.state = state
        self._write(self.earlier + time.perf_counter() - self.started)

    def finish(self, sampling_seconds: float) -> None:
        """Record, with the finished state, the sampling seconds the run's result reports, so
        that reloading the checkpoint reports the same cost; a reload that sampled nothing
        leaves the file as it is."""
        if self._saved_here:
            self._write(sampling_seconds)

    def _write(self, seconds: float) -> None:
        if self.path is None:
            return

        def write(temporary):
            with open(temporary, "wb") as file:
                pickle.dump({"format": FORMAT, "key": self.key, "state": self.state,
                             "sampling_seconds": seconds}, file)
                file.flush()
                os.fsync(file.fileno())

        _atomic_write(self.path, write)
        self._saved_here = True


class ResultDirectory:
    """Finished results, one netCDF file per name, in a directory with a manifest of the key."""

    MANIFEST = "compare.json"

    def __init__(self, directory, key: dict):
        self.directory = None if directory is None else Path(directory)
        if self.directory is None:
            return
        if self.directory.exists() and not self.directory.is_dir():
            raise ValueError(f"compare's checkpoint must be a directory (one result file per "
                             f"model goes in it), got the file {self.directory}")
        self.directory.mkdir(parents=True, exist_ok=True)
        manifest = self.directory / self.MANIFEST
        record = {"format": FORMAT, "key": _canonical(key)}
        if manifest.exists():
            saved = json.loads(manifest.read_text())
            if saved.get("format") != FORMAT:
                raise ValueError(f"checkpoint directory {self.directory} {_OLDER}")
            if saved != record:
                raise ValueError(f"checkpoint directory {self.directory} "
                                 f"{_other_run(saved['key'], record['key'])}")
        manifest.write_text(json.dumps(record))

    def path(self, name: str) -> Path:
        """Where the result of ``name`` is kept (read it with ``load_result``)."""
        return self.directory / f"{name.replace(os.sep, '_')}.nc"

    def has(self, name: str) -> bool:
        return self.directory is not None and self.path(name).exists()

    def save(self, name: str, result) -> None:
        if self.directory is not None:
            _atomic_write(self.path(name), result.to_netcdf)
