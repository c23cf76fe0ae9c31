"""Random streams: ``random_seed`` turned into a Generator once, and independent streams from it.

Public functions take ``random_seed`` (None, int, sequence of ints, ``SeedSequence`` or
``Generator``, as PyMC does); internal functions take the ``Generator`` first. Nothing here
touches NumPy's global random state.
"""

from __future__ import annotations

import numpy as np

__all__ = ["as_generator", "spawn_seeds"]


def as_generator(random_seed) -> np.random.Generator:
    """``random_seed`` as a Generator: a Generator is used as it is (its stream continues)."""
    return np.random.default_rng(random_seed)


def spawn_seeds(random_seed, n: int) -> list[np.random.SeedSequence]:
    """``n`` independent child seeds of ``random_seed`` (None, int, sequence or SeedSequence),
    one per task: the same seed gives the same children, whatever order the tasks run in."""
    if isinstance(random_seed, np.random.SeedSequence):
        return random_seed.spawn(n)
    return np.random.SeedSequence(random_seed).spawn(n)
