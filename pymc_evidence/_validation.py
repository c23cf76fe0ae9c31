"""Checks of user input shared by every estimator and ``compare``, run before any work.

One exception type per kind of mistake, with the same wording everywhere: a value of the wrong
type raises ``TypeError`` ("n_particles must be an integer, got 'x'"), a value of the right type
outside its range or choices raises ``ValueError`` ("n_particles must be an integer >= 8, got
2"). Each validator returns the value in its canonical type.
"""

from __future__ import annotations

import numbers
import os
from pathlib import Path

import pymc as pm

from pymc_evidence._compat import model_types

__all__ = ["integer", "number", "choice", "checkpoint_file", "resolve_model", "named_models"]


def integer(name: str, value, minimum: int | None = None, *, optional: bool = False,
            why: str = "") -> int | None:
    """``value`` as an int; ``optional`` lets None through. ``why`` explains the minimum."""
    if optional and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        kind = "an integer or None" if optional else "an integer"
        raise TypeError(f"{name} must be {kind}, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}{why}, got {value!r}")
    return int(value)


def number(name: str, value, *, low: float | None = None, high: float | None = None,
           low_open: bool = False, high_open: bool = False, optional: bool = False,
           why: str = "") -> float | None:
    """``value`` as a float within the interval given by ``low``/``high`` (closed unless
    ``*_open``); ``optional`` lets None through."""
    if optional and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        kind = "a number or None" if optional else "a number"
        raise TypeError(f"{name} must be {kind}, got {value!r}")
    value = float(value)
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and (value >= high if high_open else value > high)
    if too_low or too_high or value != value:  # NaN is in no interval
        raise ValueError(f"{name} must be {_interval(low, high, low_open, high_open)}{why}, "
                         f"got {value!r}")
    return value


def _interval(low, high, low_open, high_open) -> str:
    if high is None:
        return f"{'>' if low_open else '>='} {low:g}"
    if low is None:
        return f"{'<' if high_open else '<='} {high:g}"
    return f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"


def choice(name: str, value, choices):
    """``value`` if it is one of ``choices``."""
    if isinstance(value, str) or value is None or isinstance(value, (int, float)):
        if value in choices:
            return value
    raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")


def checkpoint_file(checkpoint) -> Path | None:
    """``checkpoint`` as the path of a file in a writable directory, made if missing: a long
    run must not fail at its first save, after work that is then lost."""
    if checkpoint is None:
        return None
    if not isinstance(checkpoint, (str, os.PathLike)):
        raise TypeError(f"checkpoint must be a file path (str or os.PathLike) or None, "
                        f"got {checkpoint!r}")
    path = Path(checkpoint)
    if path.is_dir():
        raise ValueError(f"checkpoint must be the path of a file, got the directory {path} "
                         f"(e.g. {path / 'run.ckpt'}; compare's checkpoint is a directory)")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"checkpoint {path}: its directory cannot be made ({err})") from err
    if not os.access(path.parent, os.W_OK):
        raise ValueError(f"checkpoint {path}: its directory {path.parent} is not writable")
    return path


def resolve_model(model):
    """The model given, or the one of the enclosing ``with`` block; a clear error otherwise."""
    if model is not None and not isinstance(model, model_types()):
        raise TypeError(f"model must be a pymc.Model, got a {type(model).__name__}: {model!r:.60}")
    return pm.modelcontext(model)


def named_models(models) -> dict:
    """``models`` (a list of models, or a dict ``{name: model}``) as a dict of distinct names;
    a list takes its names from the models (``model_<i>`` when unnamed)."""
    if isinstance(models, dict):
        named = dict(models)
    elif isinstance(models, (list, tuple)):
        named = {}
        for i, model in enumerate(models):
            name = getattr(model, "name", "") or f"model_{i}"
            if name in named:
                raise ValueError(
                    f"two models are named {name!r}: give them distinct names "
                    "(pm.Model(name=...)) or pass a dict {name: model}"
                )
            named[name] = model
    else:
        raise TypeError(
            f"models must be a list of pymc.Model or a dict {{name: model}}, got {type(models).__name__}"
        )
    if not named:
        raise ValueError("compare needs at least one model; got an empty collection")
    for name, model in named.items():
        if not isinstance(model, model_types()):
            raise TypeError(f"model {name!r} is a {type(model).__name__}, not a pymc.Model")
    return named
