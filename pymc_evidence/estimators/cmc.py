"""Contour Monte Carlo over a list of PyMC models: the estimator :func:`cmc` (Liang 2005).

The sample space of the joint posterior f(ω, H | D) over a list of models is partitioned by
model index, E_i = {(ω_i, H_i)}. A stochastic-approximation sampler learns weights ĝ(E_i)
that make every model visited equally often; at convergence ĝ(E_i) ∝ ∫_{E_i} ψ = p(D | H_i),
so ratios of ĝ are ratios of evidences (Liang 2005, §2.1 and Theorem 1).

The algorithm itself, for any sampler on any partition and with no PyMC, is
:func:`~pymc_evidence._cmc_core.cmc_core`. This module supplies its sampler over PyMC models:
HMC moves within a model (with scale moves, :mod:`pymc_evidence.scale_moves`, in a
non-centred one) and, between models, independence proposals (a multivariate t fitted
to each model's pilot posterior draws) or, for MLPs nested by hidden units, Liang's birth/death
moves (:mod:`._birth_death`); and it turns the learnt ĝ into one
:class:`~pymc_evidence.CMCResult` per model.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy.special import gammaln, logsumexp

from pymc_evidence import kernels
from pymc_evidence._constants import DENSE_METRIC_MAX_DIM
from pymc_evidence._parallel import one_blas_thread
from pymc_evidence._progress import progress_bar
from pymc_evidence._random import as_generator
from pymc_evidence._validation import integer, named_models, number
from pymc_evidence.density import check_prior_draws, different_data, get_density
from pymc_evidence.estimators._birth_death import (
    BirthDeath, FixedUnits, LiangUnits, StandardNormalUnits, validate_nested, pooled_units, unit_layout,
)
from pymc_evidence.estimators._cmc_core import CMCCoreResult, cmc_core, delta_schedule
from pymc_evidence.results import CMCResult, warn
from pymc_evidence.scale_moves import describe, find_scale_pairs, initial_widths, scale_step

__all__ = ["cmc"]


# ============================================================================ moves
class MultivariateT(NamedTuple):
    """Multivariate t independence proposal in a model's unconstrained space."""

    mean: np.ndarray  # (d,)
    chol: np.ndarray  # (d, d) lower Cholesky factor of the scale matrix
    chol_inv: np.ndarray  # (d, d) its inverse
    nu: float

    @classmethod
    def fit(cls, draws: np.ndarray, nu: float = 5.0, inflate: float = 1.2) -> "MultivariateT":
        """Mean and (slightly inflated, shrunk) covariance of posterior draws (n × d)."""
        n, d = draws.shape
        mean = draws.mean(axis=0)
        cov = np.atleast_2d(np.cov(draws, rowvar=False))
        variances = np.maximum(np.diag(cov), 1e-12)
        shrink = min(1.0, d / max(n, 1))
        cov = (1 - shrink) * cov + shrink * np.diag(variances)
        scale = inflate**2 * cov * (nu - 2) / nu if nu > 2 else inflate**2 * cov
        chol = np.linalg.cholesky(scale + 1e-12 * np.eye(d))
        return cls(mean, chol, np.linalg.inv(chol), float(nu))

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        d = self.mean.size
        z = rng.standard_normal((n, d)) @ self.chol.T
        w = np.sqrt(rng.chisquare(self.nu, size=n) / self.nu)
        return self.mean + z / w[:, None]

    def logpdf(self, x: np.ndarray) -> np.ndarray:
        d = self.mean.size
        u = (np.atleast_2d(x) - self.mean) @ self.chol_inv.T
        maha = np.sum(u**2, axis=1)
        return (
            gammaln((self.nu + d) / 2) - gammaln(self.nu / 2) - 0.5 * d * np.log(self.nu * np.pi)
            - np.sum(np.log(np.diag(self.chol))) - 0.5 * (self.nu + d) * np.log1p(maha / self.nu)
        )


class _Pilot(NamedTuple):
    draws: np.ndarray  # (n_chains * n_sweeps, d) approximate posterior draws
    around: np.ndarray  # the highest draw, centre of the period the draws are in (circular)
    chains: int
    metric: kernels.Metric
    step_size: float
    acceptance: float


def _pilot(rng, density, n_chains, n_anneal, n_sweeps, kernel_settings) -> _Pilot:
    """Approximate posterior draws of one model: anneal prior draws to λ = 1 with HMC moves.

    The draws only shape the between-model proposal and the within-model HMC metric; CMC's
    acceptance ratios keep the estimate exact whatever they are. With circular variables they
    are moved into the period centred on the highest draw, the one the model's target is
    restricted to (:func:`_make_step`).
    """
    state = kernels.init(density, density.prior_draws(rng, n_chains))
    check_prior_draws(density, state.position, state.log_prior, state.log_likelihood,
                      zero_likelihood=False)
    weights = np.full(n_chains, 1.0 / n_chains)
    step_size = 1.0 / density.dim**0.25
    dense = density.dim <= DENSE_METRIC_MAX_DIM
    ladder = np.linspace(0, 1, n_anneal + 1)[1:] ** 4
    acceptance = []
    for lam in ladder:
        metric = kernels.Metric.from_population(state.position, weights, dense)
        state, stats = kernels.mutate(rng, state, density, lam, metric, step_size, **kernel_settings)
        step_size = stats.step_size
    draws = []
    for _ in range(n_sweeps):
        metric = kernels.Metric.from_population(state.position, weights, dense)
        state, stats = kernels.mutate(rng, state, density, 1.0, metric, step_size, **kernel_settings)
        step_size = stats.step_size
        acceptance.append(stats.acceptance)
        draws.append(state)
    log_joint = np.concatenate([d.log_prior + d.log_likelihood for d in draws])
    draws = np.concatenate([d.position for d in draws])
    around = draws[np.argmax(np.where(np.isnan(log_joint), -np.inf, log_joint))]
    draws = density.wrap(draws, around)
    metric = kernels.Metric.from_population(draws, np.full(len(draws), 1.0 / len(draws)), dense)
    return _Pilot(draws, around, n_chains, metric, step_size, float(np.mean(acceptance)))


def _model_proposal_matrix(model_proposal, m: int) -> np.ndarray:
    """Q = (q_ij): probability of proposing model j from model i (j = i: a within-model move)."""
    if isinstance(model_proposal, str):
        if model_proposal == "uniform":
            if m == 1:
                return np.ones((1, 1))
            Q = np.full((m, m), 0.5 / (m - 1))
            np.fill_diagonal(Q, 0.5)
            return Q
        if model_proposal == "neighbour":
            # Liang (2005, §2.3): q_{i,i−1} = q_{ii} = q_{i,i+1} = 1/3, q_11 = q_mm = 2/3.
            Q = np.zeros((m, m))
            for i in range(m):
                for j in (i - 1, i, i + 1):
                    Q[i, min(max(j, 0), m - 1)] += 1 / 3
            return Q
        raise ValueError(
            f"model_proposal must be 'uniform', 'neighbour' or an m×m stochastic matrix, "
            f"got {model_proposal!r}"
        )
    Q = np.asarray(model_proposal, dtype=float)
    if Q.shape != (m, m) or np.any(Q < 0) or not np.allclose(Q.sum(axis=1), 1.0):
        raise ValueError(
            f"model_proposal must be an {m}×{m} matrix of non-negative rows summing to 1, got "
            f"shape {Q.shape}"
        )
    if np.any((Q > 0) != (Q.T > 0)):
        raise ValueError("model_proposal must propose j from i whenever it proposes i from j")
    return Q


class _ChainState(NamedTuple):
    """R replicas: the current model of each, and one HMC state per model (rows = replicas;
    a row is meaningful only while that replica is in that model)."""

    model: np.ndarray  # (R,) int
    states: list  # m × kernels.HMCState with R rows


class _MoveCounts(NamedTuple):
    proposed: np.ndarray  # (m, m) between-model proposals from i to j
    accepted: np.ndarray  # (m, m)
    within_accept: np.ndarray  # (m,) summed HMC acceptance probabilities
    within_moves: np.ndarray  # (m,)


class DefensiveMixture(NamedTuple):
    """q = (1 − ε) t + ε p₀ in a model's unconstrained space: a fitted multivariate t with a share
    ε of the model's own prior p₀ (defensive importance sampling, Hesterberg 1995).

    With the prior in the mixture, ψ / q ≤ L / ε: every region the posterior reaches can be
    proposed (a funnel's neck that the t and HMC never visit, say), and importance weights stay
    bounded. With circular variables the prior's draws are moved into the period centred on
    ``around``, where the target lives, so that p₀ is normalised there.
    """

    t: MultivariateT
    density: object  # the model's ModelDensity: exact prior draws, and log p₀ with Jacobians
    prior_share: float
    around: np.ndarray

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        x = self.t.draw(rng, n)
        from_prior = rng.uniform(size=n) < self.prior_share
        if from_prior.any():
            x[from_prior] = self.density.wrap(
                self.density.prior_draws(rng, int(from_prior.sum())), self.around)
        return x

    def logpdf(self, x: np.ndarray, log_prior: np.ndarray) -> np.ndarray:
        """log q(x), given the prior log density (with Jacobians) of x."""
        log_t = np.log1p(-self.prior_share) + self.t.logpdf(x)
        if self.prior_share == 0:
            return log_t
        log_prior = np.where(np.isnan(log_prior), -np.inf, log_prior)
        return np.logaddexp(log_t, np.log(self.prior_share) + log_prior)


class _IndependenceMove(NamedTuple):
    """Between any two models: ω* ~ q_j, whatever ω is (log T ratio = log q_i(ω) − log q_j(ω*))."""

    proposals: list  # one DefensiveMixture per model

    def __call__(self, rng, i, j, X, log_prior):
        new = self.proposals[j].draw(rng, X.shape[0])
        values = self.proposals[j].density(new)
        log_t = (self.proposals[i].logpdf(X, log_prior)
                 - self.proposals[j].logpdf(new, values.log_prior))
        return new, values, log_t


class _BirthDeathMove(NamedTuple):
    """Liang's birth/death move between MLPs with one hidden unit more or fewer, in the same
    protocol as :class:`_IndependenceMove`."""

    move: BirthDeath
    densities: list

    def __call__(self, rng, i, j, X, log_prior):
        new, log_t = self.move(rng, i, j, X)
        return new, self.densities[j](new), log_t


def _make_step(densities, between, Q, hmc, counts: _MoveCounts, arounds):
    """The CMC sampling step over models: eq. 2.2, with ``between(rng, i, j, X, log_prior) ->
    (X*, density values at X*, log T ratio)`` proposing the jumps from model i to model j
    (q_ij apart). With circular variables model i's target is its posterior in the period
    centred on ``arounds[i]`` (its evidence counts one period): jumps that land outside it are
    refused, and HMC moves, under which the density repeats every period, are moved back in."""
    m = len(densities)
    log_Q = np.log(np.where(Q > 0, Q, 1.0))
    cum_Q = np.cumsum(Q, axis=1)
    cum_Q[:, -1] = 1.0

    def step(rng, chain: _ChainState, log_g):
        current, states = chain.model, list(chain.states)
        R = current.size
        target = (cum_Q[current] < rng.uniform(size=R)[:, None]).sum(axis=1)
        new_model = current.copy()
        for i in range(m):
            # within-model HMC and scale moves (λ = 1; ĝ cancels)
            rows = np.flatnonzero((current == i) & (target == i))
            if rows.size:
                sub = kernels.HMCState(*(field[rows] for field in states[i]))
                step_size, metric, mean_steps, max_leapfrog, pairs, widths = hmc[i]
                n_leapfrog = kernels.leapfrog_steps(rng, mean_steps, max_leapfrog)
                jitter = np.exp(rng.uniform(-0.1, 0.1, size=rows.size))
                sub, info = kernels.hmc_step(rng, sub, densities[i], 1.0, step_size * jitter, metric, n_leapfrog)
                if pairs:
                    sub, _ = scale_step(rng, sub, densities[i], 1.0, pairs, widths)
                sub = sub._replace(position=densities[i].wrap(sub.position, arounds[i]))
                states[i] = _set_rows(states[i], rows, sub)
                counts.within_accept[i] += float(np.sum(info.acceptance_rate))
                counts.within_moves[i] += rows.size
        for i in range(m):
            for j in range(m):
                rows = np.flatnonzero((current == i) & (target == j))
                if i == j or not rows.size:
                    continue
                old = states[i]  # jumps into i only write rows of replicas outside model i
                proposal, values, log_t = between(rng, i, j, old.position[rows],
                                                  old.log_prior[rows])
                log_alpha = (
                    log_g[rows, i] - log_g[rows, j]
                    + values.log_prior + values.log_likelihood
                    - old.log_prior[rows] - old.log_likelihood[rows]
                    + log_Q[j, i] - log_Q[i, j] + log_t
                )
                inside = densities[j].in_period(proposal, arounds[j])
                log_alpha = np.where(np.isfinite(log_alpha) & inside, log_alpha, -np.inf)
                accept = np.log(rng.uniform(size=rows.size)) < log_alpha
                counts.proposed[i, j] += rows.size
                counts.accepted[i, j] += accept.sum()
                if accept.any():
                    moved = rows[accept]
                    states[j] = _set_rows(
                        states[j], moved, kernels.HMCState(proposal[accept], *(v[accept] for v in values))
                    )
                    new_model[moved] = j
        return _ChainState(new_model, states), new_model

    return step


def _set_rows(state: kernels.HMCState, rows, values: kernels.HMCState) -> kernels.HMCState:
    fields = []
    for field, new in zip(state, values):
        field = field.copy()
        field[rows] = new
        fields.append(field)
    return kernels.HMCState(*fields)


#: q(u) of a birth: ``cmc(..., unit_proposal=...)``.
UNIT_PROPOSALS = ("pilot", "normal", "liang")


def _birth_death_move(densities, pilots, layer, unit_proposal, proposal_nu) -> _BirthDeathMove:
    """Liang's birth/death move (§2.3) for the densities of MLPs with h, h + 1, … units."""
    unit_names = {layer.weights, layer.bias, layer.output}
    shared_names = [n for n in densities[0].names if n not in unit_names]
    layouts = [unit_layout(d, layer, shared_names) for d in densities]
    unit_proposals = []
    for i in range(len(densities) - 1):
        if unit_proposal == "normal":
            unit_proposals.append(StandardNormalUnits())
        elif unit_proposal == "liang":
            unit_proposals.append(LiangUnits())
        else:
            # Units of the larger model's posterior: what a unit that "fits" looks like.
            units = pooled_units(layouts[i + 1], layer, pilots[i + 1].draws)
            unit_proposals.append(FixedUnits(MultivariateT.fit(units, nu=proposal_nu)))
    return _BirthDeathMove(BirthDeath(layouts, unit_proposals), densities)


# ============================================================================ the estimator
def cmc(
    models,
    *,
    n_chains: int = 16,
    delta_1: float = 0.1,
    delta_end: float = 1e-3,
    stage_length: int = 200,
    growth: float = 1.5,
    stability_tol: float | None = None,
    model_proposal=None,
    mlp_layer=None,
    unit_proposal: str = "pilot",
    n_pilot: int = 256,
    proposal_nu: float = 5.0,
    prior_share: float = 0.1,
    anchor_draws: int = 2000,
    target_accept: float = 0.8,
    trajectory_length: float = 1.0,
    max_leapfrog: int = 64,
    path_every: int = 10,
    backend: str = "c",
    random_seed=None,
    progressbar: bool = True,
) -> dict:
    r"""Relative evidences of several models by contour Monte Carlo (Liang 2005).

    The joint space of (model, parameters) is partitioned by model, and a stochastic
    approximation learns weights ĝ that make every model visited equally often; then

    .. math::

        \hat g(E_i) \;\to\; c \int p(D \mid \omega_i, H_i)\, p(\omega_i \mid H_i)\, d\omega_i
        = c\, p(D \mid H_i) \qquad \text{(Liang 2005, Theorem 1 and §2.3)}

    so that ĝ(E_i) / Σ_j ĝ(E_j) is the posterior probability of model i under a uniform model
    prior.

    Parameters
    ----------
    models : list of pymc.Model or dict of {str: pymc.Model}
        At least two models (named as in :func:`~pymc_evidence.compare`).
    n_chains : int, default 16
        Independent CMC replicas (each with its own ĝ), run together; their spread gives the SE
        (with 8, the SE is itself uncertain by about a quarter).
    delta_1, delta_end : float, default 0.1 and 1e-3
        First modification factor and the stopping value (δ_{s+1} = √(1 + δ_s) − 1, until
        δ < ``delta_end``). The bias and variance of ĝ are O(δ) (Liang 2005, §2.1); Liang used
        10⁻⁵–10⁻⁶ with far cheaper iterations.
    stage_length : int, default 200
        K_1, iterations in the first stage; K_{s+1} = ``growth`` · K_s.
    growth : float, default 1.5
    stability_tol : float, optional
        If given, a stage is extended (up to twice K_s) until Liang's statistic S_k (batches of
        K_s/10) is below it.
    model_proposal : {"uniform", "neighbour"} or ndarray (m, m), optional
        Q = (q_ij). "uniform" (the default without ``mlp_layer``): a within-model move with
        probability 1/2, otherwise a jump to a model drawn uniformly from the others.
        "neighbour" (the default with ``mlp_layer``, and the only pattern birth/death moves
        allow): Liang's tridiagonal Q (§2.3), for models ordered by size. A matrix must have
        rows summing to 1 and a symmetric pattern.
    mlp_layer : MLPLayer or dict, optional
        For MLPs that differ only in the number of hidden units of this layer (given in order
        h, h + 1, …, sharing every other variable by name): jump between neighbouring models by
        Liang's birth/death moves (§2.3) instead of independence proposals. A birth inserts a
        new unit u ~ q at a uniformly chosen position; a death removes a uniformly chosen unit;
        the acceptance is eq. 2.2 with T ratio q_{i+1,i} / (q_{i,i+1} q(u)) (Jacobian 1).
    unit_proposal : {"pilot", "normal", "liang"}, default "pilot"
        q(u) of a birth (with ``mlp_layer``). "pilot": a multivariate t fitted to every unit of
        the larger model's pilot draws (sign-flipped copies included for odd or even
        activations). "normal": N(0, I), the exact prior of the unit when its parameters are
        the standard-normal z's of a non-centred parameterisation, so the acceptance is a
        likelihood ratio. "liang": Liang's N(μ, ζ²) for every parameter, μ and ζ² the mean and
        variance of the parameters of the units kept.
    n_pilot : int, default 256
        Chains of each model's pilot run (prior draws annealed to the posterior by HMC), whose
        draws fit the between-model proposals and the within-model HMC metric. Every replica
        moves with these, so the pilot's own error is common to the replicas and missing from
        the SE: on centred eight schools against complete pooling (10 seeds), 64 chains gave
        errors with an SD 1.6 times the reported SE, 256 chains 0.9 times. The pilot costs
        little next to the run (0.1 s of 3.5 s there).
    proposal_nu : float, default 5
        Degrees of freedom of the multivariate t independence proposals.
    prior_share : float, default 0.1
        Share ε of each model's own prior in its independence proposal and importance-sampling
        anchor, q = (1 − ε) t + ε p₀ (defensive importance sampling, Hesterberg 1995). It lets
        jumps land where neither the t nor HMC within the model goes (the neck of a
        hierarchical model's funnel: 0.12 nats low at an SE of 0.03 on centred eight schools
        without it, within its SE with it) and bounds the importance weights by L / ε.
        0 gives Liang's pure t proposals.
    anchor_draws : int, default 2000
        Importance-sampling draws per model (from its proposal) that fix the absolute level of
        the log evidences (CMC itself identifies only ratios). 0 leaves the level at
        log p(H_i | D), the log posterior model probability under a uniform prior.
    target_accept, trajectory_length, max_leapfrog
        HMC settings (pilot adaptation, and trajectories within models).
    path_every : int, default 10
        Record the model of every replica every this many iterations.
    backend : {"c", "numba"}, default "c"
    random_seed : int, sequence, numpy.random.Generator or None
    progressbar : bool, default True

    Returns
    -------
    dict of {str: CMCResult}
        One result per model, in the given order, ready for ``compare``'s table.
        ``log_evidence`` = log p̂_i + anchor, where p̂_i is the mean over replicas of
        ĝ_i / Σ_j ĝ_j; ``se`` is the SE of that sum: the replicas' spread of log p̂_i minus the
        anchor's weighted log p̂_j (a ratio to the models that fix the level, whose
        probabilities are tied to p̂_i by Σ_j p̂_j = 1) and the anchor's importance-sampling
        error. Ratios between the models are free of the anchor: their SEs (``difference_se``,
        used by ``compare``) come from the replicas. The other
        fields: ``probability`` and ``probability_se`` (posterior model probability, uniform
        model prior), ``replica_probability`` (per replica), ``log_g`` (normalised),
        ``frequency`` (visits in the last stage),
        ``between_acceptance``, ``within_acceptance``, ``anchor``, ``anchor_se``,
        ``anchor_weight`` (this model's share in the anchor), ``importance_log_evidence`` and
        ``importance_se`` (the importance-sampling check);
        each model's result has its own copy of ``settings``; with ``mlp_layer``
        also ``hidden_units``, ``birth_acceptance`` and ``death_acceptance`` (of the moves out
        of this model; NaN for the largest / smallest model).
        ``diagnostics``: one row per stage (δ, iterations, S_k, log ĝ, its SE, visiting
        frequency of this model, between-model acceptance from this model; with
        ``mlp_layer`` also birth and death acceptance).
        ``sample_stats``: the model transition path shared by all models: ``model_index``
        (chain = replica, draw = record), ``iteration`` and ``stage``; ``settings["models"]``
        names the indices. ``posterior``: the pilot's approximate posterior draws.

    Warns
    -----
    EvidenceWarning
        When visiting frequencies in the last stage are not flat (ĝ has not converged), when
        between-model moves are rarely accepted (proposals fit the posteriors badly), when
        the importance-sampling anchor disagrees with CMC's ratios beyond their errors, and,
        before any sampling, when the models observe different data (their evidences are then
        not comparable).

    Notes
    -----
    1. Pilot: for each model, anneal ``n_pilot`` prior draws to λ = 1 with HMC; fit a
       multivariate t to the draws (unconstrained space) and take the HMC metric and step size.
       The independence proposal q_i mixes this t with a share ``prior_share`` of the model's
       prior.
    2. Start every replica in a random model at a pilot draw, with log ĝ = 0.
    3. Each iteration, every replica draws j from row i of Q. If j = i, one HMC transition
       within model i. Otherwise propose ω* ~ q_j and accept with
       min{1, ĝ_i ψ_j(ω*) q_ji q_i(ω) / (ĝ_j ψ_i(ω) q_ij q_j(ω*))} (eq. 2.2), where
       ψ = prior × likelihood in each model's unconstrained space. With ``mlp_layer``,
       j = i + 1 is a birth (insert u ~ q(u) at a uniform position; T ratio 1 / q(u)) and
       j = i − 1 a death (remove a uniformly chosen unit u; T ratio q(u)).
    4. Multiply ĝ of the model visited by 1 + δ_s. After K_s iterations (and S_k small, if
       ``stability_tol``), set δ_{s+1} = √(1 + δ_s) − 1 and K_{s+1} = growth·K_s, keep ĝ.
    5. Stop when δ < δ_end; normalise each replica's ĝ to sum to 1, average over replicas.

    The independence proposals are valid for any list of models, but for multimodal
    posteriors (MLPs) a single t proposal covers one mode region and between-model acceptance
    falls (a warning says so); for MLPs nested by hidden units, the birth/death moves
    (``mlp_layer``) propose one unit at a time instead.

    References
    ----------
    Liang, F. (2005). Evidence evaluation for Bayesian neural networks using contour Monte
    Carlo. Neural Computation 17, 1385–1410.

    Hesterberg, T. (1995). Weighted average importance sampling and defensive mixture
    distributions. Technometrics 37, 185–194.

    Examples
    --------
    >>> import numpy as np, pymc as pm, pymc_evidence as pm_evidence
    >>> y = np.array([0.9, 1.4, 0.6, 1.2])
    >>> with pm.Model(name="zero") as m0:
    ...     s = pm.HalfNormal("s", 1.0)
    ...     _ = pm.Normal("y", 0.0, s, observed=y)
    >>> with pm.Model(name="free") as m1:
    ...     mu = pm.Normal("mu", 0.0, 1.0)
    ...     _ = pm.Normal("y", mu, 0.5, observed=y)
    >>> results = pm_evidence.cmc([m0, m1], random_seed=1, progressbar=False)
    >>> sorted(results)
    ['free', 'zero']
    """
    named = named_models(models)
    names = list(named)
    if len(names) < 2:
        raise ValueError(f"cmc needs at least two models to compare, got {len(names)}")
    _validate_arguments(n_chains, delta_1, delta_end, stage_length, growth, stability_tol, n_pilot,
                        proposal_nu, prior_share, anchor_draws, target_accept, trajectory_length,
                        max_leapfrog, path_every)
    layer, hidden, model_proposal, Q = _validate_moves(named, mlp_layer, unit_proposal, model_proposal)
    settings = dict(
        models=names, n_chains=int(n_chains), delta_1=delta_1, delta_end=delta_end,
        stage_length=int(stage_length), growth=growth, stability_tol=stability_tol,
        model_proposal=model_proposal if isinstance(model_proposal, str) else Q.tolist(),
        mlp_layer=None if layer is None else vars(layer), unit_proposal=unit_proposal,
        n_pilot=int(n_pilot), proposal_nu=proposal_nu, prior_share=prior_share, anchor_draws=int(anchor_draws),
        target_accept=target_accept, trajectory_length=trajectory_length,
        max_leapfrog=max_leapfrog, path_every=int(path_every), backend=backend,
    )
    rng = as_generator(random_seed)
    start = time.perf_counter()
    densities = _compile(named, backend)
    data_messages: list[str] = []
    if differs := different_data(named):  # said before any sampling, kept on every result
        warn(data_messages, differs)
    pairs = [find_scale_pairs(density) for density in densities]
    settings["scale_moves"] = {name: describe(model_pairs)
                               for name, model_pairs in zip(names, pairs) if model_pairs} or None
    compiled = time.perf_counter()
    with one_blas_thread():
        pilots, proposals, between, hmc = _pilot_moves(rng, densities, pairs, layer, settings)
        piloted = time.perf_counter()
        run = _run(rng, densities, pilots, between, hmc, Q, settings, progressbar)
    sampled = time.perf_counter()

    summary = _summarise(rng, run, densities, proposals, settings["anchor_draws"])
    messages = data_messages + _run_warnings(summary, run, layer, names)
    timing = {"compile": compiled - start, "pilot": piloted - compiled, "sampling": sampled - piloted}
    timing["total"] = time.perf_counter() - start
    sample_stats = _path_stats(run.core)
    return {
        name: CMCResult(
            log_evidence=float(summary.log_evidence[i]),
            se=float(summary.se[i]),
            model_name=name,
            diagnostics=_stage_diagnostics(run, i, layer),
            posterior=_pilot_posterior(densities[i], pilots[i]),
            sample_stats=dict(sample_stats),
            settings=settings,
            timing=timing,
            warnings=messages,
            **_model_fields(summary, run, i, hidden),
        )
        for i, name in enumerate(names)
    }


def _validate_arguments(n_chains, delta_1, delta_end, stage_length, growth, stability_tol,
                        n_pilot, proposal_nu, prior_share, anchor_draws, target_accept,
                        trajectory_length, max_leapfrog, path_every):
    """Raise on a numerical option of the wrong type or out of range, before any compiling."""
    integer("n_chains", n_chains, 2, why=" (independent replicas give the standard error)")
    number("delta_1", delta_1, low=0, low_open=True)
    number("delta_end", delta_end, low=0, high=delta_1, low_open=True, why=" (delta_1)")
    integer("stage_length", stage_length, 10)
    number("growth", growth, low=1)
    number("stability_tol", stability_tol, low=0, low_open=True, optional=True)
    integer("n_pilot", n_pilot, 8)
    number("proposal_nu", proposal_nu, low=0, low_open=True)
    number("prior_share", prior_share, low=0, high=1, high_open=True)
    integer("anchor_draws", anchor_draws, 0)
    number("target_accept", target_accept, low=0, high=1, low_open=True, high_open=True)
    number("trajectory_length", trajectory_length, low=0, low_open=True)
    integer("max_leapfrog", max_leapfrog, 1)
    integer("path_every", path_every, 1)


def _validate_moves(named: dict, mlp_layer, unit_proposal, model_proposal):
    """Check the between-model moves asked for, before anything is compiled.

    Returns the MLP layer and each model's hidden units (both None without ``mlp_layer``),
    ``model_proposal`` with its default filled in, and Q.
    """
    layer, hidden = None, None
    if mlp_layer is not None:
        layer, hidden = validate_nested(named, mlp_layer)
        if unit_proposal not in UNIT_PROPOSALS:
            raise ValueError(
                f"unit_proposal must be one of {list(UNIT_PROPOSALS)}, got {unit_proposal!r}"
            )
    if model_proposal is None:
        model_proposal = "uniform" if layer is None else "neighbour"
    Q = _model_proposal_matrix(model_proposal, len(named))
    if layer is not None:
        index = np.arange(len(named))
        far = np.abs(np.subtract.outer(index, index)) > 1
        if np.any(Q[far] > 0):
            raise ValueError(
                "with mlp_layer, model_proposal may only propose neighbouring models (one hidden "
                "unit more or fewer); use 'neighbour' or a tridiagonal matrix"
            )
    return layer, hidden, model_proposal, Q


def _compile(named: dict, backend: str) -> list:
    """Each model's density, in order; a failure names its model."""
    densities = []
    for name, model in named.items():
        try:
            densities.append(get_density(model, backend=backend))
        except (ValueError, TypeError) as err:
            raise type(err)(f"model {name!r}: {err}") from err
    return densities


def _pilot_moves(rng, densities, pairs, layer, settings: dict):
    """Pilot-run every model, and fit the moves to its draws.

    Returns the pilots, each model's independence proposal, the between-model move and each
    model's within-model moves (HMC step size, metric, mean leapfrog steps, their maximum;
    its scale moves' pairs, :func:`~pymc_evidence.scale_moves.find_scale_pairs`, and widths).
    """
    kernel_settings = {
        k: settings[k] for k in ("target_accept", "trajectory_length", "max_leapfrog")
    }
    pilots = [_pilot(rng, d, settings["n_pilot"], 8, 4, {**kernel_settings, "scale_pairs": p})
              for d, p in zip(densities, pairs)]
    proposals = [
        DefensiveMixture(MultivariateT.fit(p.draws, nu=settings["proposal_nu"]), density,
                         settings["prior_share"], p.around)
        for p, density in zip(pilots, densities)
    ]
    if layer is None:
        between = _IndependenceMove(proposals)
    else:
        between = _birth_death_move(
            densities, pilots, layer, settings["unit_proposal"], settings["proposal_nu"]
        )
    hmc = [(p.step_size, p.metric, settings["trajectory_length"] / p.step_size,
            settings["max_leapfrog"], model_pairs, initial_widths(model_pairs))
           for p, model_pairs in zip(pilots, pairs)]
    return pilots, proposals, between, hmc


class _Run(NamedTuple):
    """What a CMC run leaves for the estimates and diagnostics."""

    core: CMCCoreResult
    counts: _MoveCounts  # over the whole run
    stage_proposed: np.ndarray  # (S, m, m) between-model proposals from i to j in each stage
    stage_accepted: np.ndarray  # (S, m, m)


def _run(rng, densities, pilots, between, hmc, Q, settings: dict, progressbar: bool) -> _Run:
    """Start every replica in a random model at a random pilot draw, and run the core."""
    m, R = len(densities), settings["n_chains"]
    current = rng.integers(0, m, size=R)
    states = []
    for density, pilot in zip(densities, pilots):
        rows = rng.integers(0, len(pilot.draws), size=R)
        states.append(kernels.init(density, pilot.draws[rows]))
    counts = _MoveCounts(np.zeros((m, m)), np.zeros((m, m)), np.zeros(m), np.zeros(m))
    step = _make_step(densities, between, Q, hmc, counts, [p.around for p in pilots])
    proposed, accepted = [], []
    bar = _Progress(progressbar, len(delta_schedule(settings["delta_1"], settings["delta_end"])))

    def callback(stage, delta, log_g):
        proposed.append(counts.proposed.copy())
        accepted.append(counts.accepted.copy())
        bar.update(stage, delta, log_g)

    core = cmc_core(
        rng, step, _ChainState(current, states), m, R,
        delta_1=settings["delta_1"], delta_end=settings["delta_end"],
        stage_length=settings["stage_length"], growth=settings["growth"],
        stability_tol=settings["stability_tol"], path_every=settings["path_every"],
        callback=callback,
    )
    bar.close()
    # The counts accumulate over the run: differences between stages are each stage's own.
    return _Run(core, counts, np.diff(proposed, axis=0, prepend=0),
                np.diff(accepted, axis=0, prepend=0))


class _Summary(NamedTuple):
    """Every model's numbers from a run (arrays over the m models)."""

    probability: np.ndarray  # p̂_i: the mean over replicas of ĝ_i / Σ_j ĝ_j
    probability_se: np.ndarray
    log_p: np.ndarray  # log p̂_i
    se: np.ndarray  # the SE of log p̂_i + anchor
    anchor: float  # log evidence = log p̂_i + anchor
    anchor_se: float
    anchor_weights: np.ndarray  # each model's share in the anchor
    is_log_z: np.ndarray  # importance-sampling log evidences (NaN without anchor draws)
    is_se: np.ndarray
    log_evidence: np.ndarray
    frequency: np.ndarray  # (R, m) visiting frequencies in the last stage
    between_acceptance: np.ndarray  # of the jumps out of each model
    within_acceptance: np.ndarray  # mean HMC acceptance within each model


def _summarise(rng, run: _Run, densities, proposals, anchor_draws: int) -> _Summary:
    """Average the normalised ĝ over replicas (Liang's Σ ĝ = const), SE from their spread; the
    importance-sampling anchor lifts log p̂ to log evidences."""
    probs = np.exp(run.core.log_g)  # (R, m)
    R = probs.shape[0]
    p_mean = probs.mean(axis=0)
    p_se = probs.std(axis=0, ddof=1) / np.sqrt(R)
    log_p = np.log(p_mean)
    anchor, weights, is_log_z, is_se = _anchor(
        rng, densities, proposals, anchor_draws, log_p, p_se / p_mean
    )
    se, anchor_se = _level_se(probs / p_mean, weights, is_se)
    last = run.core.counts[-1]
    proposed, accepted = run.counts.proposed, run.counts.accepted
    return _Summary(
        p_mean, p_se, log_p, se, anchor, anchor_se, weights, is_log_z, is_se,
        log_evidence=log_p + anchor,
        frequency=last / last.sum(axis=1, keepdims=True),
        between_acceptance=accepted.sum(axis=1) / np.maximum(proposed.sum(axis=1), 1),
        within_acceptance=run.counts.within_accept / np.maximum(run.counts.within_moves, 1),
    )


def _anchor(rng, densities, proposals, n: int, log_p, log_p_se):
    """The level of the log evidences, which CMC's ratios leave open.

    Importance sampling (n draws from each model's proposal) estimates every log Z_i; the
    anchor is the inverse-variance weighted mean of log Ẑ_i − log p̂_i. Returns the anchor, the
    weights, and each log Ẑ_i with its SE; without draws (n = 0) the anchor and the weights
    are 0 and the rest NaN.
    """
    m = len(densities)
    anchor, weights = 0.0, np.zeros(m)
    is_log_z, is_se = np.full(m, np.nan), np.full(m, np.nan)
    if n:
        for i, density in enumerate(densities):
            is_log_z[i], is_se[i] = _importance_log_z(rng, density, proposals[i], n)
        offsets = is_log_z - log_p
        var = is_se**2 + log_p_se**2
        ok = np.isfinite(offsets) & np.isfinite(var) & (var > 0)
        if ok.any():
            weights[ok] = 1.0 / var[ok]
            weights /= weights.sum()
            anchor = float(np.sum(weights[ok] * offsets[ok]))
    return anchor, weights, is_log_z, is_se


def _level_se(relative, weights, is_se):
    """SEs of every log p̂_i + anchor, and of the anchor (NaN without one).

    With anchor = Σ_j w_j (log Ẑ_j − log p̂_j), the error of log p̂_i + anchor is
    δ log p̂_i − Σ_j w_j δ log p̂_j + Σ_j w_j δ log Ẑ_j. The first part is a ratio to the models
    that fix the level: log p̂_i and log p̂_j are far from independent (Σ_j p̂_j = 1, so with two
    models their errors are opposite), and its SE comes from the replicas' spread, to first
    order δ log p̂ = p_r / p̂ − 1 (``relative``, (R, m)). The importance-sampling errors are
    independent of the replicas. Adding SE(log p̂_i) and the anchor's SE in quadrature instead
    reported 0.63 of the error's spread for a model whose level came from another's draws.
    """
    R = relative.shape[0]
    used = weights > 0  # a model never visited (p̂ = 0) has no weight, and NaN here
    anchor_part = relative[:, used] @ weights[used]  # (R,)
    is_var = float(np.sum(weights**2 * np.nan_to_num(is_se) ** 2))
    se = np.sqrt((relative - anchor_part[:, None]).var(axis=0, ddof=1) / R + is_var)
    anchor_se = float(np.sqrt(anchor_part.var(ddof=1) / R + is_var)) if weights.any() else np.nan
    return se, anchor_se


def _importance_log_z(rng, density, proposal, n):
    """log Ẑ by importance sampling from the fitted proposal, and its delta-method SE (over the
    period the proposal is centred on, with circular variables)."""
    x = proposal.draw(rng, n)
    values = density(x)
    log_w = values.log_prior + values.log_likelihood - proposal.logpdf(x, values.log_prior)
    log_w = np.where(np.isnan(log_w) | ~density.in_period(x, proposal.around), -np.inf, log_w)
    log_z = float(logsumexp(log_w) - np.log(n))
    relative = np.exp(log_w - log_z)
    se = float(np.std(relative, ddof=1) / np.sqrt(n))
    return log_z, se


def _run_warnings(summary: _Summary, run: _Run, layer, names: list) -> list[str]:
    """Warn (and list the warnings) when ĝ has not converged, when between-model moves are
    rarely accepted, and when the importance-sampling check disagrees with CMC's ratios."""
    messages: list[str] = []
    m = len(names)
    visits = summary.frequency.mean(axis=0)
    # stacklevel 4: the warnings point at the caller of cmc, two frames up from here.
    if np.max(np.abs(visits * m - 1)) > 0.2:
        warn(messages, f"visiting frequencies in the last stage are not flat "
             f"({np.round(visits, 3).tolist()} against {1 / m:.3f} each): ĝ has "
             "not converged; lengthen the stages (stage_length, growth) or lower delta_end.",
             stacklevel=4)
    proposed, accepted = run.counts.proposed, run.counts.accepted
    total_between = accepted.sum() / max(proposed.sum(), 1)
    if total_between < 0.02:
        reason = (
            "the independence proposals fit the posteriors badly (multimodal or heavy-tailed "
            "posteriors)" if layer is None else
            "new units drawn from q(u) rarely fit (try another unit_proposal)"
        )
        warn(messages, f"only {100 * total_between:.2f} % of between-model moves were accepted: "
             f"{reason}, so ĝ converges slowly.", stacklevel=4)
    if np.isfinite(summary.anchor_se):  # there was an anchor to check against
        resid = summary.is_log_z - summary.log_evidence
        tol = 4 * np.sqrt(summary.is_se**2 + summary.se**2) + 0.05
        bad = np.isfinite(resid) & (np.abs(resid) > tol) & (summary.probability > 1e-3)
        if bad.any():
            warn(messages, "the importance-sampling check disagrees with CMC's evidence ratios "
                 f"for {[names[i] for i in np.flatnonzero(bad)]}: a proposal misses part of "
                 "its posterior, or ĝ has not converged.", stacklevel=4)
    return messages


def _stage_diagnostics(run: _Run, i: int, layer) -> pd.DataFrame:
    """Model i's row per stage: δ, iterations, S_k, log ĝ and its SE, visiting frequency, and
    the acceptance of the jumps out of it (with ``layer``: births and deaths apart)."""
    core = run.core
    R = core.log_g.shape[0]
    stage_p = np.exp(core.log_g_stages[:, :, i])  # (S, R)
    rows = []
    for s, delta in enumerate(core.deltas):
        p_s, a_s = run.stage_proposed[s], run.stage_accepted[s]
        row = {
            "delta": float(delta),
            "iterations": int(core.stage_iterations[s]),
            "stability": float(core.stability[s]),
            "log_g": float(np.log(stage_p[s].mean())),
            "log_g_se": float(stage_p[s].std(ddof=1) / np.sqrt(R) / stage_p[s].mean()),
            "frequency": float(np.mean(core.counts[s, :, i] / core.counts[s].sum(axis=1))),
            "between_acceptance": float(a_s[i].sum() / max(p_s[i].sum(), 1)),
        }
        if layer is not None:
            row["birth_acceptance"] = _rate(a_s, p_s, i, i + 1)
            row["death_acceptance"] = _rate(a_s, p_s, i, i - 1)
        rows.append(row)
    diagnostics = pd.DataFrame(rows)
    diagnostics.index.name = "stage"
    return diagnostics


def _model_fields(summary: _Summary, run: _Run, i: int, hidden) -> dict:
    """Model i's own :class:`CMCResult` fields; with birth/death moves (``hidden`` given) also its hidden units
    and the acceptance of its births and deaths."""
    own = {
        "probability": float(summary.probability[i]),
        "probability_se": float(summary.probability_se[i]),
        "log_g": float(summary.log_p[i]), "frequency": float(summary.frequency[:, i].mean()),
        "between_acceptance": float(summary.between_acceptance[i]),
        "within_acceptance": float(summary.within_acceptance[i]),
        "anchor": summary.anchor, "anchor_se": summary.anchor_se,
        "anchor_weight": float(summary.anchor_weights[i]),
        "importance_log_evidence": float(summary.is_log_z[i]),
        "importance_se": float(summary.is_se[i]),
        "n_iterations": int(run.core.stage_iterations.sum()),
        "replica_probability": tuple(np.exp(run.core.log_g[:, i]).tolist()),
    }
    if hidden is not None:
        accepted, proposed = run.counts.accepted, run.counts.proposed
        own["hidden_units"] = int(hidden[i])
        own["birth_acceptance"] = _rate(accepted, proposed, i, i + 1)
        own["death_acceptance"] = _rate(accepted, proposed, i, i - 1)
    return own


def _rate(accepted, proposed, i, j) -> float:
    """Acceptance of the jumps from model i to model j (NaN if j is not a model or none tried)."""
    if not 0 <= j < len(proposed) or proposed[i, j] == 0:
        return float("nan")
    return float(accepted[i, j] / proposed[i, j])


def _pilot_posterior(density, pilot: _Pilot) -> dict:
    """The pilot's draws in the model's own variables, shaped (chain, draw, …)."""
    constrained = density.to_constrained(pilot.draws)
    return {
        k: v.reshape(-1, pilot.chains, *v.shape[1:]).swapaxes(0, 1) for k, v in constrained.items()
    }


def _path_stats(core: CMCCoreResult) -> dict:
    """The model transition path, shared by every model's result: (replica, record) arrays."""
    R = core.path.shape[1]
    return {
        "model_index": core.path.T.copy(),
        "iteration": np.broadcast_to(core.path_iteration, (R, core.path_iteration.size)).copy(),
        "stage": np.broadcast_to(core.path_stage, (R, core.path_stage.size)).copy(),
    }


class _Progress:
    """One bar step per stage, showing δ and the current p̂; nothing when disabled."""

    def __init__(self, enabled: bool, n_stages: int):
        self.bar = progress_bar(enabled, total=n_stages, desc="CMC stages")

    def update(self, stage, delta, log_g):
        if self.bar is not None:
            p = np.exp(log_g).mean(axis=0)
            self.bar.update(1)
            self.bar.set_postfix_str(f"δ={delta:.2g}, p̂={np.round(p, 3).tolist()}")

    def close(self):
        if self.bar is not None:
            self.bar.close()
