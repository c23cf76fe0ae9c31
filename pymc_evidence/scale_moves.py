"""Scale moves: Metropolis moves along a non-centred hierarchy's ridge.

A non-centred model writes weights as a standardised block scaled by a hyperparameter,
w = z · exp(−c·u) (the robot-arm MLP's w = z / √α has u = log α and c = ½; w = z · σ has
u = log σ and c = −1). Where the data fix w, the posterior of (u, z) lies along the curve
z · exp(−c·u) = w, which HMC with one metric follows only in short steps: on the robot-arm MLP
with four hidden units the precisions kept a correlation of 0.87–0.93 with their start after
40 HMC transitions at λ = 1; with these moves after each transition it was 0.00–0.58 after
five.

The move shifts u by δ ~ N(0, width²) and multiplies z by exp(c·δ), which leaves w and so the
likelihood unchanged. The map is a bijection with Jacobian exp(n·c·δ) for a block of n
values, and its inverse is the same map with −δ, so it is accepted with probability

.. math:: \\min\\{1,\\ \\pi_\\lambda(u + \\delta, z e^{c\\delta}) \\, e^{n c \\delta}
          / \\pi_\\lambda(u, z)\\}

(Metropolis–Hastings with a deterministic transformation; Liu & Sabatti 2000 move along such
groups of scalings with a generalised Gibbs step). It is invariant for the tempered posterior at
any λ, whatever the model, so a wrongly detected pair costs evaluations but no correctness.

Pairs are found numerically (:func:`find_scale_pairs`): a scalar log-transformed value
variable u and an untransformed block z form one when moving them together leaves the log
likelihood unchanged at prior draws while moving u alone does not.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["ScalePair", "find_scale_pairs", "describe", "propose", "scale_step", "initial_widths"]

#: Exponents c tried for w = z · exp(−c·u): u the log of a precision (c = ½, 1) or of a scale
#: (c = −½, −1).
POWERS = (0.5, 1.0, -0.5, -1.0)
#: Acceptance the random-walk widths adapt to (the optimum for one dimension, Roberts &
#: Rosenthal 2001).
TARGET_ACCEPTANCE = 0.44


class ScalePair(NamedTuple):
    """A scale u (column ``scale`` of the flat vector) and the block z it scales
    (columns ``start:stop``): the likelihood depends on them only through z · exp(−c·u),
    c = ``power``. The names are the value variables'."""

    scale: int
    start: int
    stop: int
    power: float
    scale_name: str
    block_name: str


def find_scale_pairs(density, draws: int = 4, step: float = 0.5) -> tuple[ScalePair, ...]:
    """The (scale, block) pairs of ``density``'s model along whose ridge :func:`scale_step`
    can move.

    A pair is kept when, at ``draws`` prior draws where the log likelihood is finite, moving
    u by ``step`` and scaling z by exp(c · step) leaves the log likelihood unchanged (to 1e-9
    relative) while moving u alone changes it. The draws come from a fixed seed: this reads
    the model's structure and must not consume the estimator's random numbers.
    """
    offsets = np.cumsum([0, *density.sizes])
    scales = [i for i, name in enumerate(density.names)
              if name.endswith("_log__") and density.sizes[i] == 1]
    blocks = [i for i, name in enumerate(density.names) if not name.endswith("__")]
    if not scales or not blocks:
        return ()
    X = density.prior_draws(np.random.default_rng(0), draws)
    with np.errstate(all="ignore"):
        base = density(X).log_likelihood
    X = X[np.isfinite(base)]
    base = base[np.isfinite(base)]
    if not len(X):
        return ()
    candidates, moved = [], []
    for i in scales:
        u = offsets[i]
        alone = X.copy()
        alone[:, u] += step
        candidates.append((i, None, 0.0))
        moved.append(alone)
        for j in blocks:
            for power in POWERS:
                both = alone.copy()
                both[:, offsets[j]:offsets[j + 1]] *= np.exp(power * step)
                candidates.append((i, j, power))
                moved.append(both)
    with np.errstate(all="ignore"):
        values = density(np.concatenate(moved)).log_likelihood
    values = values.reshape(len(candidates), len(X))
    unchanged = np.all(np.abs(values - base) <= 1e-9 * (1.0 + np.abs(base)), axis=1)
    pairs, paired = [], set()
    for (i, j, power), same in zip(candidates, unchanged):
        if j is None:
            enters = not same  # u changes the likelihood by itself
            continue
        if enters and same and j not in paired:
            paired.add(j)
            pairs.append(ScalePair(int(offsets[i]), int(offsets[j]), int(offsets[j + 1]),
                                   power, density.names[i], density.names[j]))
    return tuple(pairs)


def describe(pairs) -> list | None:
    """The pairs as an estimator's ``settings["scale_moves"]`` lists them:
    ``[scale, block, power]`` by value-variable names, or None when there are none."""
    return [[p.scale_name, p.block_name, p.power] for p in pairs] or None


def initial_widths(pairs) -> np.ndarray:
    """Random-walk widths to start from: along the ridge the block's standard-normal prior
    gives log π a curvature of about 2c²n, and 2.4 / √curvature is the one-dimensional
    optimum's scale."""
    return np.array([2.4 / (abs(p.power) * np.sqrt(2.0 * (p.stop - p.start))) for p in pairs])


def propose(rng, position: np.ndarray, pair: ScalePair, width: float) -> tuple:
    """A move of every row of ``position`` along ``pair``'s ridge: u + δ and z · exp(c·δ),
    δ ~ N(0, width²). Returns the proposals and the log Jacobian n·c·δ of each, to add to the
    log ratio of target densities."""
    delta = width * rng.standard_normal(position.shape[0])
    proposal = position.copy()
    proposal[:, pair.scale] += delta
    proposal[:, pair.start:pair.stop] *= np.exp(pair.power * delta)[:, None]
    return proposal, (pair.stop - pair.start) * pair.power * delta


def scale_step(rng, state, density, lam: float, pairs, widths: np.ndarray,
               support=None) -> tuple:
    """One scale move per pair for every chain, each pair after the other.

    ``state`` is a :class:`~pymc_evidence.kernels.HMCState`; returns the new state and the
    acceptance rate of each pair's moves (across chains).
    Proposals outside ``support`` (see :func:`pymc_evidence.kernels.hmc_step`) are rejected.
    """
    K = state.position.shape[0]
    acceptance = np.empty(len(pairs))
    for k, pair in enumerate(pairs):
        proposal, log_jacobian = propose(rng, state.position, pair, widths[k])
        with np.errstate(all="ignore"):
            values = density(proposal)
            log_ratio = (values.log_prior + lam * values.log_likelihood
                         - state.log_prior - lam * state.log_likelihood + log_jacobian)
        accepted = np.log(rng.uniform(size=K)) < np.where(np.isfinite(log_ratio), log_ratio,
                                                          -np.inf)
        if support is not None and accepted.any():
            accepted[accepted] = support(proposal[accepted])
        state = state.where(accepted, proposal, values)
        acceptance[k] = accepted.mean()
    return state, acceptance
