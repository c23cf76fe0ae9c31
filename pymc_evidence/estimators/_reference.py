r"""Tempering from a reference built at a mode the particles never reached.

Chaining from the prior can leave every particle in modes far below the best one (on the
robot-arm MLP with three hidden units, 73 nats of evidence lay in a mode no particle reached).
Once the mode search has found such a mode, a second run starts at it instead: the generalised
stepping stone of Fan et al. (2011) replaces the prior at λ = 0 by a normalised reference q,

.. math::

    \pi_\lambda(\theta) \propto q(\theta)^{1-\lambda}\, \bigl(p(\theta) L(\theta)\bigr)^{\lambda},
    \qquad \log Z = \sum_k \log \mathbb{E}_{\pi_{\lambda_{k-1}}}
    \!\left[\bigl(p L / q\bigr)^{\lambda_k - \lambda_{k-1}}\right],

which is chaining with q as the "prior" and p L / q as the "likelihood": :class:`ModeReference`
presents exactly that to the tempering code. Any q gives an unbiased estimate; a q close to the
posterior gives a small variance, one much narrower than it a heavy-tailed one that typically
runs low.

q is a defensive mixture: half the prior (so that whatever the tempering from the prior reaches
is reached again) and half a Gaussian fitted to a population relaxed by HMC at λ = 1 from the
found mode, symmetrised over the MLP layer's copies so that every tempered target keeps the
symmetry the aligned moves rely on. Symmetrising is a fold, not a sum over the 2^h·h! copies:
the Gaussian restricted to the mode's domain (the points that are their own nearest copy to the
mode, probability P), spread uniformly over the copies, has density q₀(a(θ)) / (|G|·P) at θ,
a(θ) the copy of θ in the domain. The domains of the copies tile the space only when the copies
are distinct: a mode that a symmetry fixes (units that coincide, as when the data determine only
their sum, or a unit whose weights vanish) is its own copy, every point ties between copies, and
on three exchangeable units the folded Gaussian held 0.67 of its mass, putting the evidence
0.25–0.43 nats high at 5–8 times its SE. The domain is therefore that of the mode moved slightly
off every such point (:func:`domain_anchor`). The tempering keeps its particles in that domain,
where the fold is the identity (:class:`DomainReference`).

:func:`temper_from_mode` relaxes the population, fits the reference and tempers from it,
relaxing longer until the estimates of two doublings in a row agree: a reference narrower than
the posterior at the mode gives estimates that rise as it widens.

Fan, Y., Wu, R., Chen, M.-H., Kuo, L. and Lewis, P. O. (2011). Choosing among partition models
in Bayesian phylogenetics. Molecular Biology and Evolution 28, 523–532.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from pymc_evidence import kernels
from pymc_evidence.density import DensityValues
from pymc_evidence.estimators._stepping_stone import round_increments, stepping_stone
from pymc_evidence.estimators._tempering import Round, run_round
from pymc_evidence.symmetry import (alignment_map, align_units, domain_anchor, is_nearest_copy,
                                    mlp_symmetry, transform_units)

__all__ = ["DomainReference", "FromModeProgress", "GaussianAtMode", "ModeReference",
           "ReferenceLevels", "relax_at_mode", "temper_from_mode"]

#: The reference's weight on the prior (the rest on the Gaussian at the mode).
PRIOR_WEIGHT = 0.5
#: The Gaussian's covariance is the relaxed population's times this: a reference wider than
#: the posterior costs rungs, a narrower one a heavy-tailed estimate.
WIDENING = 1.5
#: Draws that estimate the probability P of the Gaussian's own domain.
DOMAIN_DRAWS = 20_000
#: HMC transitions per sweep of the relaxation (the metric is re-estimated between sweeps).
TRANSITIONS_PER_SWEEP = 5
#: HMC trajectories at the mode, in units of the metric, and their most leapfrog steps, in
#: the relaxation and in the tempering from the reference: four times the tempering's
#: defaults, because the points have to travel along the mode's extent rather than mix
#: locally. On the robot-arm MLP with three hidden units this spread the relaxed population
#: about three times as far per gradient evaluation as trajectories of length 1.
LONG_TRAJECTORY_LENGTH, LONG_MAX_LEAPFROG = 4.0, 256


def _copies(density, layers):
    """The one layer whose symmetries the reference is folded over (or None), its hidden
    units and the number of copies of a point."""
    if not layers:
        return None, 0, 1
    layer = layers[0]
    h = layer.hidden_units(dict(zip(density.names, density.shapes)))
    return layer, h, mlp_symmetry(h, layer.activation)


def relax_at_mode(density, layers, mode: np.ndarray, rng: np.random.Generator, sweeps: int,
                  state: kernels.HMCState | None = None, n_points: int = 512,
                  step_size: float = 0.1, dense: bool = True,
                  on_sweep=None) -> tuple[kernels.HMCState, float]:
    """A population spread over the posterior around ``mode`` by ``sweeps`` sweeps of HMC at
    λ = 1, continuing ``state`` when given; returns it with the adapted step size.
    ``on_sweep(state, step_size, k)`` is called after the k-th sweep.

    It starts from tiny steps off the mode (scaled by the Hessian's curvatures), because a
    sharp mode's likelihood falls by millions of nats a short way off it, and spreads from
    there along long trajectories: on the robot-arm MLP with three hidden units the spread
    still grew after 1600 sweeps of the tempering's shorter ones. The moves stay in the
    mode's domain under the layers' symmetries (:func:`domain_anchor`'s), the starts moved there
    as their copies; ``dense``: the metric's kind, as the tempering's.
    """
    anchor = domain_anchor(mode)
    support = functools.partial(is_nearest_copy, density, layers, anchor) if layers else None
    if state is None:
        with np.errstate(all="ignore"):
            curvature, vectors = np.linalg.eigh(-density.hessian(mode))
        scale = 1e-3 / np.sqrt(np.clip(np.nan_to_num(np.abs(curvature), nan=1.0), 1.0, None))
        start = mode + (rng.standard_normal((n_points, density.dim)) * scale) @ vectors.T
        if layers:
            start = align_units(density, layers, anchor, start)
        state = kernels.init(density, start)
        keep = np.isfinite(state.log_prior + state.log_likelihood)
        if support is not None:
            keep &= support(state.position)
        state = kernels.HMCState(*(field[keep] for field in state))
    weights = np.full(len(state.position), 1.0 / len(state.position))
    for k in range(1, sweeps + 1):
        metric = kernels.Metric.from_population(
            state.position, weights, dense,
            gradients=state.grad_log_prior + state.grad_log_likelihood)
        state, move = kernels.mutate(rng, state, density, 1.0, metric, step_size,
                                     n_transitions=TRANSITIONS_PER_SWEEP, decorrelation=0.0,
                                     support=support,
                                     trajectory_length=LONG_TRAJECTORY_LENGTH,
                                     max_leapfrog=LONG_MAX_LEAPFROG)
        step_size = move.step_size
        if on_sweep is not None:
            on_sweep(state, step_size, k)
    return state, step_size


class GaussianAtMode(NamedTuple):
    """The reference's Gaussian: its mean, the Cholesky factor of its covariance, the log of
    its normaliser (the copies and the domain's probability P included) and that log's SE."""

    mean: np.ndarray
    chol: np.ndarray
    log_norm: float
    log_domain_se: float


class ModeReference:
    """The density the tempering sees when it starts from a reference q at ``mode``: "prior"
    q, "likelihood" p L / q, so that its λ = 1 is the model's posterior and its evidence the
    model's.

    q = ``PRIOR_WEIGHT`` × prior + the rest × the ``gaussian``, folded over the copies of
    ``layers`` (module docstring); :meth:`fit` builds it from a population at the mode.
    ``log_domain_se`` is the standard error of the estimated log P, part of the estimate's.
    """

    def __init__(self, density, layers, mode: np.ndarray, gaussian: GaussianAtMode):
        self.base, self.layers, self.mode = density, list(layers), np.asarray(mode, float)
        self.anchor = domain_anchor(self.mode)
        self.dim, self.names, self.shapes = density.dim, density.names, density.shapes
        self.split, self.to_constrained = density.split, density.to_constrained
        self.layer, self.hidden_units, _ = _copies(density, self.layers)
        self.gaussian = gaussian
        self._chol_inv = np.linalg.inv(gaussian.chol)

    @property
    def log_domain_se(self) -> float:
        return self.gaussian.log_domain_se

    @classmethod
    def fit(cls, density, layers, mode: np.ndarray, population: np.ndarray,
            rng: np.random.Generator) -> ModeReference:
        """The reference whose Gaussian is N(mean of ``population``, ``WIDENING`` × its
        covariance), P estimated from ``DOMAIN_DRAWS`` of its draws."""
        copies = _copies(density, list(layers))[2]
        chol = np.linalg.cholesky(np.atleast_2d(np.cov(population, rowvar=False)) * WIDENING)
        log_norm = (np.sum(np.log(np.diag(chol))) + 0.5 * density.dim * np.log(2 * np.pi)
                    + np.log(copies))
        unnormalised = cls(density, layers, mode,
                           GaussianAtMode(population.mean(axis=0), chol, log_norm, np.nan))
        draws = unnormalised._gaussian_draws(rng, DOMAIN_DRAWS)
        inside = unnormalised._in_domain(draws).mean()
        if inside == 0:
            raise ValueError("the Gaussian at the mode has no mass in the mode's domain")
        return cls(density, layers, mode, unnormalised.gaussian._replace(
            log_norm=log_norm + np.log(inside),
            log_domain_se=float(np.sqrt((1 - inside) / (inside * DOMAIN_DRAWS)))))

    def _gaussian_draws(self, rng, n):
        return self.gaussian.mean + rng.standard_normal((n, self.dim)) @ self.gaussian.chol.T

    def _in_domain(self, X):
        if not self.layers:
            return np.ones(len(X), dtype=bool)
        return is_nearest_copy(self.base, self.layers, self.anchor, X)

    def _log_gaussian(self, X) -> tuple[np.ndarray, np.ndarray]:
        """log q of the folded Gaussian at the rows of X, and its gradient."""
        rows = np.arange(len(X))[:, None]
        if self.layers:
            index, signs = alignment_map(self.base, self.layers, self.anchor, X)
            aligned = signs * X[rows, index]
        else:
            aligned = X
        r = (aligned - self.gaussian.mean) @ self._chol_inv.T
        grad_aligned = -(r @ self._chol_inv)
        if not self.layers:
            return -0.5 * np.sum(r**2, axis=1) - self.gaussian.log_norm, grad_aligned
        # The fold is a signed permutation: carry the gradient back to θ's coordinates.
        grad = np.empty_like(grad_aligned)
        grad[rows, index] = signs * grad_aligned
        return -0.5 * np.sum(r**2, axis=1) - self.gaussian.log_norm, grad

    def __call__(self, X: np.ndarray) -> DensityValues:
        X = np.atleast_2d(np.asarray(X, float))
        values = self.base(X)
        log_gauss, grad_gauss = self._log_gaussian(X)
        from_prior = np.log(PRIOR_WEIGHT) + values.log_prior
        log_q = np.logaddexp(from_prior, np.log1p(-PRIOR_WEIGHT) + log_gauss)
        with np.errstate(invalid="ignore"):
            share = np.exp(from_prior - log_q)[:, None]
        share = np.nan_to_num(share)
        grad_q = share * values.grad_log_prior + (1 - share) * grad_gauss
        return DensityValues(
            log_q,
            values.log_prior + values.log_likelihood - log_q,
            grad_q,
            values.grad_log_prior + values.grad_log_likelihood - grad_q,
        )

    def model_log_densities(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The model's own log prior and log likelihood at the rows of X."""
        return self.base.log_densities(X)

    def prior_draws(self, rng: np.random.Generator, draws: int) -> np.ndarray:
        """Exact draws from q: prior draws and folded Gaussian draws in their proportions."""
        from_prior = int(rng.binomial(draws, PRIOR_WEIGHT))
        batches, needed = [], draws - from_prior
        while needed > 0:
            batch = self._gaussian_draws(rng, draws)
            batch = batch[self._in_domain(batch)][:needed]
            batches.append(batch)
            needed -= len(batch)
        gaussian = np.concatenate(batches) if batches else np.empty((0, self.dim))
        if self.layer is not None:
            flips = self.layer.sign_flips is not None
            h = self.hidden_units
            gaussian = np.array([
                transform_units(self.base, self.layer, x, rng.permutation(h),
                                rng.choice([-1.0, 1.0], size=h) if flips else None)
                for x in gaussian
            ]).reshape(-1, self.dim)
        X = np.concatenate([self.base.prior_draws(rng, from_prior), gaussian])
        return X[rng.permutation(draws)]

    def on_domain(self) -> ModeReference:
        """This reference as the tempering from it samples it: on the anchor's domain only."""
        return DomainReference(self.base, self.layers, self.mode, self.gaussian)


class DomainReference(ModeReference):
    """A :class:`ModeReference` for particles kept in its anchor's domain: draws aligned
    there, and the Gaussian evaluated without the fold.

    In the domain the fold is the identity, so values and gradients there are the reference's
    own. Outside it the fold jumps where the nearest copy changes, and HMC trajectories that
    leave the domain and come back cross such jumps: on Liang's MLP with four hidden units the
    folded Gaussian held the tempering's step size near 0.004 at 256 leapfrog steps per
    trajectory, where the unfolded one takes 0.1–0.3 at 15–60. A trajectory's gradient
    may come from any fixed smooth field (the leapfrog map stays reversible and
    volume-preserving, and the end point is judged by its density), and an end point outside
    the domain is rejected; so the tempered laws are the folded reference's, restricted to the
    domain, which the symmetric targets allow (``symmetry.is_nearest_copy``).
    """

    def _log_gaussian(self, X) -> tuple[np.ndarray, np.ndarray]:
        r = (X - self.gaussian.mean) @ self._chol_inv.T
        return -0.5 * np.sum(r**2, axis=1) - self.gaussian.log_norm, -(r @ self._chol_inv)

    def prior_draws(self, rng: np.random.Generator, draws: int) -> np.ndarray:
        X = super().prior_draws(rng, draws)
        return align_units(self.base, self.layers, self.anchor, X) if self.layers else X


#: Sweeps of HMC that first relax the population at the found mode, doubled until
#: ``AGREEING_MOVES`` doublings in a row give estimates that agree (thermodynamic's
#: effort-check rule: the band and the lower level's noise) or the sweeps reach the most.
REFERENCE_SWEEPS, MAX_REFERENCE_SWEEPS = 25, 400
#: One agreement can be a pause in the rise: on the robot-arm MLP with three hidden units, a
#: doubling that moved the estimate by 0.6 nats came after moves of 4.5 and 6.3, and in
#: another fit a move of 1.6 was followed by one of 3.4.
AGREEING_MOVES = 2


class ReferenceLevels(NamedTuple):
    """The tempering from references at the found mode: the last reference and its round,
    each level's (sweeps, estimate), the last move when the sweeps ran out before
    ``AGREEING_MOVES`` doublings in a row agreed (else None), and the round settings it ran
    with (for more groups from it)."""

    reference: ModeReference
    last_round: Round
    levels: list
    unsettled: float | None
    round_settings: dict

    @property
    def last_rise(self) -> float:
        """How far the last level's estimate rose above the level ``AGREEING_MOVES`` before
        it (0 if it fell): a reference narrower than the posterior gives estimates that run
        low, so levels that agree but still rose may be low by about as much again."""
        span = min(AGREEING_MOVES, len(self.levels) - 1)
        before, last = self.levels[-1 - span][1], self.levels[-1][1]
        return max(0.0, float(last.log_evidence - before.log_evidence))


def _settings_at_mode(round_settings, anchor) -> dict:
    """``round_settings`` with HMC trajectories at least ``LONG_TRAJECTORY_LENGTH`` long, and
    aligned moves kept in one copy's domain with the full mass matrix: at the sharp mode the
    points stay in one copy, and the matrix follows a ridge along which units' weights move
    together (averaged over the symmetries, those correlations between units vanish). The
    copy is the one at ``anchor``, the reference's (:class:`DomainReference`)."""
    kernel = round_settings["kernel"]
    return {**round_settings, "symmetric_moves": False, "anchor": anchor, "kernel": {
        **kernel,
        "trajectory_length": max(kernel["trajectory_length"], LONG_TRAJECTORY_LENGTH),
        "max_leapfrog": max(kernel["max_leapfrog"], LONG_MAX_LEAPFROG),
    }}


class FromModeProgress(NamedTuple):
    """How far :func:`temper_from_mode` got, all a checkpoint needs to go on from there: the
    relaxed population, its step size and sweeps, the current level's reference (None until
    its relaxation is done) and round (partial or finished), and the levels finished before
    it, as (sweeps, estimate)."""

    relaxed: kernels.HMCState | None = None
    step_size: float = 0.1
    sweeps_done: int = 0
    gaussian: GaussianAtMode | None = None
    round: Round | None = None
    levels: tuple = ()


def _agreeing_moves(levels, settled) -> int:
    """How many doublings in a row, ending with the last level, were ``settled``."""
    count = 0
    for (_, previous), (_, current) in reversed(list(zip(levels, levels[1:]))):
        if not settled(previous, current):
            break
        count += 1
    return count


def temper_from_mode(rng, density, mode, n_groups, n_particles, round_settings, bar, settled,
                     progress: FromModeProgress | None = None, save=None,
                     agrees_with=None) -> ReferenceLevels:
    """Relax a population at ``mode`` for ``REFERENCE_SWEEPS`` sweeps, temper from the
    reference fitted to it (``n_groups`` groups of ``n_particles``, the adaptive ladder of
    ``round_settings``, with long trajectories), and repeat with twice the sweeps until
    ``AGREEING_MOVES`` doublings in a row are ``settled(previous, current)`` or the sweeps
    reach ``MAX_REFERENCE_SWEEPS``.

    ``agrees_with``: an independent estimate of the same evidence (the tempering from the
    prior's, when its particles reached the mode), or None. A first level ``settled`` with it
    ends the tempering there: two paths whose failures differ (particles that do not hold
    the mode in proportion, a reference narrower than the posterior) agree, and the
    doublings would cost about three times as much again. On Liang's MLPs with one to three
    hidden units the levels that followed such a first level moved from it by at most 0.17 nats.

    ``save(progress)`` is called after every sweep, reference and tempering stage; given the
    generator's state at that call, ``progress`` goes on from there to the same result.
    """
    round_settings = _settings_at_mode(round_settings, domain_anchor(mode))
    layers = round_settings["layers"]
    progress = progress or FromModeProgress()
    save = save or (lambda progress: None)
    while True:
        sweeps = REFERENCE_SWEEPS * 2 ** len(progress.levels)
        if progress.gaussian is None:
            before = progress

            def relaxed(state, step_size, k):
                save(before._replace(relaxed=state, step_size=step_size,
                                     sweeps_done=before.sweeps_done + k))

            state, step_size = relax_at_mode(
                density, layers, mode, rng, sweeps - progress.sweeps_done, progress.relaxed,
                step_size=progress.step_size, dense=round_settings["dense_mass"],
                on_sweep=relaxed)
            reference = ModeReference.fit(density, layers, mode, state.position,
                                          rng).on_domain()
            progress = FromModeProgress(state, step_size, sweeps, reference.gaussian, None,
                                        progress.levels)
            save(progress)
        else:
            reference = DomainReference(density, layers, mode, progress.gaussian)
        bar.new_round(f"from the mode, {sweeps} sweeps")
        level = progress
        current_round = run_round(rng, reference, n_groups, n_particles, None, None,
                                  round_settings, bar.update, partial=progress.round,
                                  on_stage=lambda partial: save(level._replace(round=partial)))
        current = stepping_stone(*round_increments([current_round]))
        current = current._replace(se=float(np.hypot(current.se, reference.log_domain_se)))
        levels = [*progress.levels, (sweeps, current)]
        if (_agreeing_moves(levels, settled) >= AGREEING_MOVES
                or (len(levels) == 1 and agrees_with is not None
                    and settled(agrees_with, current))):
            return ReferenceLevels(reference, current_round, levels, None, round_settings)
        if sweeps >= MAX_REFERENCE_SWEEPS and len(levels) > 1:
            move = current.log_evidence - levels[-2][1].log_evidence
            return ReferenceLevels(reference, current_round, levels, float(move), round_settings)
        progress = progress._replace(gaussian=None, round=None, levels=tuple(levels))
