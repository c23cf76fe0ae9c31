"""Posterior modes the particles never reached: optimisation from prior draws against
optimisation from the particles.

Tempering on an MLP posterior can leave every particle in modes far below the best one. On the
robot-arm MLP with three hidden units, optimisations started from a chaining run's final
particles climbed to log p(θ, D) = −75.5 at best, while 7 of 32 started from prior draws
reached +17 or more; the run's estimate was 73 nats below the evidence with an SE of 0.12. No
statistic of the particles shows this: only a search that does not start from them does.

:func:`search_modes` maximises log p(θ, D) from prior draws and from the best particles. A mode
from the prior draws more than :data:`UNREACHED_MARGIN` above every mode the particles lead to
was not reached.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pymc_evidence._optimize import joint_objective, multistart

__all__ = ["ModeSearch", "search_modes", "UNREACHED_MARGIN"]

#: A mode counts as unreached when its log p(θ, D) exceeds the best the particles lead to by
#: more than this (nats): optimisers stopping short on an MLP's ridges differ by far less.
UNREACHED_MARGIN = 1.0


class ModeSearch(NamedTuple):
    """The best log p(θ, D) reached from prior draws and from the particles (NaN where no
    start had a finite density), the optimisations run, and where the best of all of them
    ended (unconstrained; None when none did)."""

    best_from_prior: float
    best_from_particles: float
    n_optimisations: int
    mode: np.ndarray | None = None

    @property
    def gap(self) -> float:
        """How far the best mode from the prior draws lies above the particles' best (nats)."""
        return self.best_from_prior - self.best_from_particles

    @property
    def unreached(self) -> bool:
        return bool(self.gap > UNREACHED_MARGIN)


def search_modes(density, positions: np.ndarray, log_joint: np.ndarray,
                 rng: np.random.Generator, prior_starts: int, particle_starts: int) -> ModeSearch:
    """Maximise log p(θ, D) from ``prior_starts`` prior draws and from the ``particle_starts``
    particles of highest ``log_joint`` (rows of ``positions``, unconstrained), by trust-region
    Newton steps on the exact Hessian (on the robot-arm MLP with three hidden units, 7 of 32
    prior draws climbed to the best mode this way, against 6 of 64 by L-BFGS).
    """
    objective = joint_objective(density)
    from_prior = multistart(objective, density.prior_draws(rng, prior_starts), progressbar=False,
                            hessian=density.hessian)
    finite = np.flatnonzero(np.isfinite(log_joint))
    best = finite[np.argsort(-log_joint[finite], kind="stable")[:particle_starts]]
    from_particles = multistart(objective, positions[best], progressbar=False,
                                hessian=density.hessian)
    best = _best([*from_prior, *from_particles])
    return ModeSearch(_value(_best(from_prior)), _value(_best(from_particles)),
                      len(from_prior) + len(from_particles), None if best is None else best.x)


def _best(optima):
    finite = [opt for opt in optima if np.isfinite(opt.value)]
    return max(finite, key=lambda opt: opt.value) if finite else None


def _value(optimum) -> float:
    return np.nan if optimum is None else optimum.value
