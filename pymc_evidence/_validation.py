"""Checks of user input shared by every estimator and ``compare``, run before any work."""

from __future__ import annotations

from pymc_evidence._compat import model_types

__all__ = ["named_models"]


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
