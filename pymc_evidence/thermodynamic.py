"""Thermodynamic chaining: stepping-stone and thermodynamic integration over tempered posteriors.

Barber & Bishop (1997) chain the prior (λ = 0, evidence 1) to the posterior (λ = 1) through
tempered distributions π_λ ∝ p(θ) L(θ)^λ (their eq. 9) and multiply the evidence ratios of
neighbouring rungs (eq. 5), each estimated by importance sampling (eq. 4). Here the draws at each
rung come from a population of particles moved by HMC (:mod:`pymc_evidence.kernels`), the ladder
is chosen adaptively, and the population is split into independent groups whose spread gives an
honest standard error.
"""

from __future__ import annotations

import copy
import functools
import json
import multiprocessing
import os
import pickle
import time
from concurrent.futures import as_completed
from pathlib import Path
from typing import NamedTuple

import cloudpickle
import numpy as np
import pandas as pd
import pymc as pm
from scipy.special import logsumexp
from scipy.optimize import brentq
from scipy.stats import chi2

from pymc_evidence import kernels
from pymc_evidence._parallel import (
    fork_is_safe, local_pool, one_blas_thread, stop_pool, usable_cpus,
)
from pymc_evidence.density import get_density
from pymc_evidence.results import EvidenceResult, warn
from pymc_evidence.symmetry import alignment_map, as_layers

__all__ = ["thermodynamic", "power_ladder"]

#: Up to this many parameters, ``mass_matrix="auto"`` estimates a dense mass matrix.
DENSE_MASS_MAX_DIM = 400
#: With ``cores=None``, extra groups run in parallel processes only when they are expected to
#: take longer than this (seconds, sequentially): each worker starts and compiles the density.
PARALLEL_MIN_SECONDS = 20.0


def power_ladder(n_stages: int, power: float = 5.0) -> np.ndarray:
    """Friel & Pettitt's ladder λ_k = (k / n)^power, k = 0..n: rungs crowd near λ = 0.

    Parameters
    ----------
    n_stages : int
        Number of rungs after λ = 0.
    power : float, default 5
        Larger powers put more rungs near the prior.
    """
    if n_stages < 1:
        raise ValueError(f"n_stages must be at least 1, got {n_stages}")
    return (np.arange(n_stages + 1) / n_stages) ** power


class _Stage(NamedTuple):
    """What one rung of one round recorded; arrays run over the round's groups."""

    lam: float
    log_ratio: np.ndarray  # (G,) stepping-stone increment per group
    log_ratio_var: np.ndarray  # (G,) its delta-method variance
    ess: float  # conditional ESS of the incremental weights, particles per group (mean)
    mean_ll: np.ndarray  # (G,) weighted E_λ[log L] after the move
    var_ll: np.ndarray  # (G,) weighted Var_λ[log L] after the move
    rhat: float
    resampled: float  # fraction of groups resampled
    move: kernels.MutationStats


class _Round(NamedTuple):
    prior_mean_ll: np.ndarray  # (G,)
    prior_var_ll: np.ndarray  # (G,)
    stages: list
    final_state: kernels.HMCState
    final_log_weights: np.ndarray  # (G, n)


def _weighted_moments(values: np.ndarray, log_weights: np.ndarray):
    """Per-group weighted mean and variance, ignoring particles of zero weight."""
    weights = np.exp(log_weights)
    safe = np.where(weights > 0, values, 0.0)
    mean = np.sum(weights * safe, axis=1)
    var = np.sum(weights * (safe - mean[:, None]) ** 2, axis=1)
    return mean, var


def _increment(log_likelihood, delta):
    """δ · log L, where a zero likelihood stays zero (−inf) however small δ > 0 is."""
    with np.errstate(invalid="ignore"):
        return np.where(np.isneginf(log_likelihood), -np.inf, delta * log_likelihood)


def _conditional_ess(log_weights, log_likelihood, delta) -> float:
    """Zhou, Johansen & Aston's conditional ESS of the increment exp(δ·log L), as a fraction.

    Averaged over the groups that still have particles of positive weight.
    """
    increment = _increment(log_likelihood, delta)
    first = logsumexp(log_weights + increment, axis=1)
    live = np.isfinite(first)
    if not live.any():
        return 0.0
    second = logsumexp((log_weights + 2 * increment)[live], axis=1)
    return float(np.mean(np.exp(2 * first[live] - second)))


def _next_lambda(log_weights, log_likelihood, lam, target_cess) -> float:
    """Largest λ' ≤ 1 whose incremental weights keep the conditional ESS at ``target_cess``.

    Particles of zero likelihood lose their weight at any δ > 0, so the target is relative to
    the conditional ESS as δ → 0⁺ (1 unless the likelihood vanishes somewhere).
    """
    target = target_cess * _conditional_ess(log_weights, log_likelihood, 0.0)
    if _conditional_ess(log_weights, log_likelihood, 1.0 - lam) >= target:
        return 1.0
    delta = brentq(
        lambda d: _conditional_ess(log_weights, log_likelihood, d) - target,
        0.0, 1.0 - lam, xtol=1e-12, rtol=1e-6,
    )
    return lam + max(delta, 1e-12)


def _systematic_resample(rng, log_weights: np.ndarray) -> np.ndarray:
    """Systematic resampling of one group: indices into its n particles."""
    n = log_weights.shape[0]
    cumulative = np.cumsum(np.exp(log_weights - logsumexp(log_weights)))
    cumulative[-1] = 1.0
    return np.searchsorted(cumulative, (rng.uniform() + np.arange(n)) / n)


def _take(state: kernels.HMCState, index: np.ndarray) -> kernels.HMCState:
    return kernels.HMCState(*(field[index] for field in state))


def _align(density, layers, state: kernels.HMCState, weights: np.ndarray) -> kernels.HMCState:
    """Move every particle to its copy (under the MLP layers' symmetries) nearest the heaviest.

    The copies have the same density, so the move keeps every tempered target invariant; after
    it the population's covariance describes one copy of the posterior's modes instead of the
    spread over all 2^h·h! of them, and the metric built from it allows far longer steps.
    The symmetries are signed permutations, so gradients move with the positions.
    """
    reference = state.position[np.argmax(weights)]
    maps = [alignment_map(density, layers, reference, x) for x in state.position]
    index = np.stack([m[0] for m in maps])
    signs = np.stack([m[1] for m in maps])

    def move(values):
        return signs * np.take_along_axis(values, index, axis=1)

    return state._replace(
        position=move(state.position),
        grad_log_prior=move(state.grad_log_prior),
        grad_log_likelihood=move(state.grad_log_likelihood),
    )


def _check_prior_population(density, state: kernels.HMCState) -> None:
    """Fail early when the density is broken at exact prior draws."""
    bad_prior = ~np.isfinite(state.log_prior)
    bad_lik = np.isnan(state.log_likelihood) | np.isposinf(state.log_likelihood)
    if bad_prior.any() or bad_lik.any():
        which = "log prior" if bad_prior.any() else "log likelihood"
        row = np.flatnonzero(bad_prior | bad_lik)[0]
        point = {k: v[0] for k, v in density.to_constrained(state.position[row : row + 1]).items()}
        raise ValueError(
            f"the {which} is not finite at {int(np.sum(bad_prior | bad_lik))} of "
            f"{len(bad_prior)} exact prior draws, e.g. at {point}. Check the model's "
            "parameterisation (e.g. a likelihood scale that can be zero) and its data for NaN."
        )
    if np.all(np.isneginf(state.log_likelihood)):
        raise ValueError(
            "the log likelihood is -inf at every prior draw: the data are impossible under the "
            "prior (check the observed values against the likelihood's support)"
        )


def _run_round(
    rng, density, n_groups, n_particles, ladder, tuning, options, progress,
    partial=None, on_stage=None,
):
    """One tempered SMC run of ``n_groups`` independent groups sharing one ladder.

    With ``ladder=None`` the ladder is built adaptively from the pooled population. ``tuning``
    (from the first round, on the same ladder) gives each stage's step size and number of HMC
    transitions; without it the step size adapts within the round and each stage makes the
    transitions the previous stage suggested (the first ``max_transitions``). ``partial``
    (a :class:`_Round` whose last stage has λ < 1) continues an interrupted round;
    ``on_stage`` is called with the round so far after every finished stage.
    """
    G, n = n_groups, n_particles
    if partial is None:
        state = kernels.init(density, density.prior_draws(rng, G * n))
        _check_prior_population(density, state)
        log_weights = np.full((G, n), -np.log(n))
        prior_mean_ll, prior_var_ll = _weighted_moments(
            state.log_likelihood.reshape(G, n), log_weights
        )
        step_size = tuning[0].step_size if tuning else 1.0 / density.dim**0.25
        n_transitions = options["kernel"]["max_transitions"]
        stages, lam = [], 0.0
    else:
        prior_mean_ll, prior_var_ll, stages, state, log_weights = partial
        stages = list(stages)
        lam, step_size = stages[-1].lam, stages[-1].move.step_size
        n_transitions = stages[-1].move.suggested_transitions
    while lam < 1.0:
        k = len(stages)
        ll = state.log_likelihood.reshape(G, n)
        if ladder is None:
            new_lam = _next_lambda(log_weights, ll, lam, options["target_cess"])
        else:
            new_lam = float(ladder[k + 1])
        increment = _increment(ll, new_lam - lam)
        ess = _conditional_ess(log_weights, ll, new_lam - lam) * n
        log_ratio = logsumexp(log_weights + increment, axis=1)
        # A dead group (every particle of zero likelihood) estimates Z = 0 and keeps no weight.
        dead = ~np.isfinite(log_ratio)
        with np.errstate(invalid="ignore"):
            relative = np.exp(increment - log_ratio[:, None])
            log_ratio_var = np.sum(np.exp(2 * log_weights) * (relative - 1.0) ** 2, axis=1)
            log_weights = log_weights + increment - log_ratio[:, None]
        log_ratio_var[dead] = 0.0
        log_weights[dead] = -np.inf
        lam = new_lam

        # Resample the groups whose weights have degenerated, within each group only.
        with np.errstate(divide="ignore"):
            group_ess = 1.0 / np.sum(np.exp(2 * log_weights), axis=1)
        to_resample = np.flatnonzero(group_ess < options["resample_threshold"] * n)
        if to_resample.size:
            index = np.arange(G * n)
            for g in to_resample:
                index[g * n : (g + 1) * n] = g * n + _systematic_resample(rng, log_weights[g])
                log_weights[g] = -np.log(n)
            state = _take(state, index)

        weights = np.exp(log_weights.ravel())
        if options["layers"]:
            state = _align(density, options["layers"], state, weights)
        metric = kernels.Metric.from_population(
            state.position, weights / weights.sum(), options["dense_mass"],
            gradients=state.grad_log_prior + lam * state.grad_log_likelihood,
        )
        if tuning:
            step_size, n_transitions = tuning[k].step_size, tuning[k].suggested_transitions
        state, move = kernels.mutate(
            rng, state, density, lam, metric, step_size, n_transitions=n_transitions,
            **options["kernel"],
        )
        step_size, n_transitions = move.step_size, move.suggested_transitions
        ll = state.log_likelihood.reshape(G, n)
        mean_ll, var_ll = _weighted_moments(ll, log_weights)
        mean_ll[dead], var_ll[dead] = np.nan, np.nan
        rhat = _rhat(ll) if G > 1 else np.nan
        stages.append(
            _Stage(lam, log_ratio, log_ratio_var, ess, mean_ll, var_ll, rhat,
                   to_resample.size / G, move)
        )
        progress(lam, stages)
        if on_stage is not None:
            on_stage(_Round(prior_mean_ll, prior_var_ll, stages, state, log_weights))
    return _Round(prior_mean_ll, prior_var_ll, stages, state, log_weights)


def _rhat(values: np.ndarray) -> float:
    """Rank-normalised R-hat of a per-stage statistic, with groups as chains."""
    import arviz as az

    finite = values[:, np.all(np.isfinite(values), axis=0)]
    if finite.shape[1] < 4:
        return np.nan
    return float(az.rhat(finite))


class _Estimate(NamedTuple):
    log_evidence: float
    se: float
    se_within: float
    se_between: float
    per_group: np.ndarray


def _combine_stepping_stone(log_ratio: np.ndarray, log_ratio_var: np.ndarray) -> _Estimate:
    """Stepping-stone estimate from per-group, per-stage increments (arrays G×S).

    Each group's evidence estimate Ẑ_g = Π_k r̂_gk is unbiased, so groups are averaged on the
    evidence scale: log Ẑ = log mean_g Ẑ_g. Its SE is the largest of the within-group error
    propagated from the stages' weights, the delta-method spread of the Ẑ_g between groups, and
    the heavy-tail bound of :func:`_lognormal_se`.
    """
    per_group = log_ratio.sum(axis=1)
    G = per_group.size
    log_z = float(logsumexp(per_group) - np.log(G))
    relative = np.exp(per_group - log_z)
    within = float(np.sqrt(np.sum(relative**2 * log_ratio_var.sum(axis=1))) / G)
    if G > 1:
        between = max(float(np.std(relative, ddof=1) / np.sqrt(G)), _lognormal_se(per_group))
    else:
        between = np.inf
    return _Estimate(log_z, max(within, between), within, between, per_group)


def _lognormal_se(log_z_groups: np.ndarray) -> float:
    """SE of log mean_g Ẑ_g when the groups' log estimates are normal, as SMC's are.

    Under the SMC central limit theorem log Ẑ_g ~ N(log Z − σ²/2, σ²) (Bérard, Del Moral &
    Doucet 2014), so the mean of G groups has relative SE √(expm1(σ²)/G), returned as
    log(1 + that) nats (≈ σ/√G for small σ). It matters when the groups disagree by nats: the
    sample spread of the Ẑ_g then misses the tail that the spread of their logs reveals (one
    group dominating the average gives a delta-method SE near 1 however far apart they are).
    """
    finite = log_z_groups[np.isfinite(log_z_groups)]
    if finite.size < 2:
        return np.inf
    s2 = float(np.var(finite, ddof=1))
    if s2 == 0.0:
        return 0.0
    log_expm1 = s2 + np.log(-np.expm1(-s2))
    return float(np.logaddexp(0.0, 0.5 * (log_expm1 - np.log(finite.size))))


def _combine_integration(lambdas, mean_ll, var_ll, n_particles) -> _Estimate:
    """Thermodynamic integration ∫₀¹ E_λ[log L] dλ per group (arrays G×(S+1)).

    Trapezoid rule with the Friel, Hurn & Wyse (2014) correction
    − Σ_k (Δλ_k)²/12 · (Var_{λ_k}[log L] − Var_{λ_{k−1}}[log L]).
    """
    delta = np.diff(lambdas)
    with np.errstate(invalid="ignore"):
        trapezoid = np.sum(delta * (mean_ll[:, 1:] + mean_ll[:, :-1]) / 2, axis=1)
        correction = np.sum(delta**2 / 12 * (var_ll[:, 1:] - var_ll[:, :-1]), axis=1)
    per_group = trapezoid - correction
    finite = np.isfinite(per_group)
    if not finite.any():
        return _Estimate(np.nan, np.nan, np.nan, np.nan, per_group)
    per_group, var_ll = per_group[finite], var_ll[finite]
    coefficient = np.zeros(len(lambdas))
    coefficient[1:] += delta / 2
    coefficient[:-1] += delta / 2
    within_var = np.sum(coefficient**2 * var_ll / n_particles, axis=1)
    G = per_group.size
    estimate = float(np.mean(per_group))
    within = float(np.sqrt(np.sum(within_var)) / G)
    between = float(np.std(per_group, ddof=1) / np.sqrt(G)) if G > 1 else np.inf
    return _Estimate(estimate, max(within, between), within, between, per_group)


def _diagnostics(rounds: list, log_ratio, log_ratio_var) -> pd.DataFrame:
    """One row per stage, pooled over every group of every round."""
    G = log_ratio.shape[0]
    pooled = logsumexp(log_ratio, axis=0) - np.log(G)
    relative = np.exp(log_ratio - pooled)
    pooled_se = np.sqrt(np.sum(relative**2 * log_ratio_var, axis=0)) / G
    rows = []
    for k, stage in enumerate(rounds[0].stages):
        per_round = [r.stages[k] for r in rounds]
        weight = np.array([s.log_ratio.size for s in per_round], dtype=float)
        weight /= weight.sum()
        mean_ll = np.concatenate([s.mean_ll for s in per_round])
        var_ll = np.concatenate([s.var_ll for s in per_round])
        rows.append(
            {
                "lambda": stage.lam,
                "log_ratio": pooled[k],
                "log_ratio_se": pooled_se[k],
                "ess": float(np.dot(weight, [s.ess for s in per_round])),
                "rhat": float(np.nanmax([s.rhat for s in per_round])),
                "acceptance": float(np.dot(weight, [s.move.acceptance for s in per_round])),
                "step_size": float(np.dot(weight, [s.move.step_size for s in per_round])),
                "n_leapfrog": int(max(s.move.n_leapfrog for s in per_round)),
                "n_transitions": int(max(s.move.n_transitions for s in per_round)),
                "divergences": int(sum(s.move.divergences for s in per_round)),
                "resampled": float(np.dot(weight, [s.resampled for s in per_round])),
                "mean_log_likelihood": float(np.mean(mean_ll)),
                "var_log_likelihood": float(np.mean(var_ll) + np.var(mean_ll)),
            }
        )
    frame = pd.DataFrame(rows)
    frame.index.name = "stage"
    return frame


def _validate(n_particles, n_groups, target_se, max_groups, ladder, target_cess, resample_threshold):
    if int(n_particles) != n_particles or n_particles < 8:
        raise ValueError(f"n_particles must be an integer >= 8, got {n_particles!r}")
    if int(n_groups) != n_groups or n_groups < 2:
        raise ValueError(
            f"n_groups must be an integer >= 2 (the spread between independent groups is part "
            f"of the standard error), got {n_groups!r}"
        )
    if target_se is not None and not target_se > 0:
        raise ValueError(f"target_se must be positive or None, got {target_se!r}")
    if max_groups < n_groups:
        raise ValueError(f"max_groups ({max_groups}) must be at least n_groups ({n_groups})")
    if not 0 < target_cess < 1:
        raise ValueError(f"target_cess must be in (0, 1), got {target_cess!r}")
    if not 0 <= resample_threshold <= 1:
        raise ValueError(f"resample_threshold must be in [0, 1], got {resample_threshold!r}")
    if ladder is not None:
        ladder = np.asarray(ladder, dtype=float)
        if (
            ladder.ndim != 1
            or ladder.size < 2
            or ladder[0] != 0.0
            or ladder[-1] != 1.0
            or np.any(np.diff(ladder) <= 0)
        ):
            raise ValueError(
                "ladder must be a strictly increasing sequence of temperatures from 0 to 1 "
                f"inclusive, e.g. power_ladder(20); got {ladder!r}"
            )
    return ladder


def thermodynamic(
    model=None,
    *,
    target_se: float | None = 0.1,
    n_particles: int = 256,
    n_groups: int = 4,
    max_groups: int = 32,
    ladder=None,
    target_cess: float = 0.8,
    resample_threshold: float = 0.5,
    target_accept: float = 0.8,
    trajectory_length: float = 1.0,
    max_leapfrog: int = 64,
    decorrelation: float = 0.05,
    max_transitions: int = 20,
    mass_matrix: str = "auto",
    mlp_layers=None,
    checkpoint=None,
    backend: str = "c",
    cores: int | None = None,
    random_seed=None,
    progressbar: bool = True,
) -> EvidenceResult:
    r"""Log evidence by thermodynamic chaining (stepping-stone) and thermodynamic integration.

    .. math::

        \log p(D \mid M) = \sum_{k=1}^{S} \log
            \mathbb{E}_{\pi_{\lambda_{k-1}}}\!\left[L(\theta)^{\lambda_k - \lambda_{k-1}}\right],
        \qquad \pi_\lambda(\theta) \propto p(\theta)\, L(\theta)^{\lambda}

    (Barber & Bishop 1997, eq. 4, 5 and 9), and the thermodynamic-integration identity
    :math:`\log p(D \mid M) = \int_0^1 \mathbb{E}_{\pi_\lambda}[\log L(\theta)]\, d\lambda`.

    Parameters
    ----------
    model : pymc.Model, optional
        Taken from the ``with`` context when omitted. Log likelihood = observed variables plus
        ``pm.Potential`` terms; prior = free variables (exactly sampleable, proper).
    target_se : float or None, default 0.1
        Standard error to reach (nats): the one knob trading time for accuracy. After the first
        round, more independent groups are run on the same ladder until the SE reaches it (at
        most ``max_groups``). ``None`` runs one round only.
    n_particles : int, default 256
        Particles per group.
    n_groups : int, default 4
        Independent groups in the first round (each is its own SMC population).
    max_groups : int, default 32
        Upper bound on groups over all rounds.
    ladder : array_like, optional
        Temperatures 0 = λ₀ < … < λ_S = 1 (e.g. :func:`power_ladder`). Default: adaptive.
    target_cess : float, default 0.8
        For the adaptive ladder: the next λ keeps the conditional ESS of the incremental weights
        at this fraction, which puts rungs densely near λ = 0 without hand-tuning.
    resample_threshold : float, default 0.5
        A group is resampled (systematic) when its ESS falls below this fraction.
    target_accept, trajectory_length, max_leapfrog, decorrelation, max_transitions
        HMC moves at each rung (see :func:`pymc_evidence.kernels.mutate`).
    mass_matrix : {"auto", "dense", "diag"}, default "auto"
        Inverse mass matrix estimated from the weighted population at each rung: the dense
        covariance (handles correlated posteriors) or its diagonal. "auto" is dense up to
        ``DENSE_MASS_MAX_DIM`` parameters.
    mlp_layers : MLPLayer or list of MLPLayer, optional
        The model's MLP hidden layers (see :class:`~pymc_evidence.MLPLayer`). Before each rung's
        moves every particle is mapped to its copy, under the layers' sign-flip and permutation
        symmetries, nearest the heaviest particle: the density is unchanged, but the mass
        matrix then fits one copy of the modes rather than all of them (on the robot-arm MLP
        with h = 4 the step size doubles and the groups' estimates, 90 nats apart without it,
        come within 11 nats). Recommended for every MLP.
    checkpoint : str or path, optional
        File where every finished stage is saved (atomically, with the random generator's
        state). If it exists, the run resumes after its last finished stage and returns exactly
        what an uninterrupted run would; a finished run is returned without sampling. A
        checkpoint written with other settings or another model raises an error. The result's
        ``timing["sampling"]`` counts the sampling of every session that worked on the run
        (``timing["earlier_sessions"]``: the part before this call).
    backend : {"c", "numba"}, default "c"
        PyTensor backend for the compiled density.
    cores : int, optional
        Processes for the extra groups that ``target_se`` asks for. They run in chunks of
        ``n_groups`` groups, each chunk with its own random stream, so the result is the same
        for every value of ``cores``. Default: every usable CPU when the extra groups are
        expected to take more than ``PARALLEL_MIN_SECONDS`` (judged from the first round) and
        workers can be forked (Linux, no other Python thread running: no
        ``if __name__ == "__main__"`` guard needed) and this is not itself a worker process
        (e.g. of ``compare(executor=...)``), else one. An explicit ``cores > 1`` where forking is
        not safe starts workers from a fork server, which re-imports the main script: guard it.
    random_seed : int, sequence, numpy.random.Generator or None
        Same seed, same result.
    progressbar : bool, default True

    Returns
    -------
    EvidenceResult
        ``log_evidence`` and ``se`` from stepping-stone; ``estimates`` holds the
        thermodynamic-integration estimate ``ti`` and ``ti_se``; ``diagnostics`` one row per
        stage (λ, log ratio, its SE, ESS, R-hat across groups, acceptance, step size, mean and
        variance of log L, ...); ``posterior`` the particles at λ = 1 with groups as chains.

    Warns
    -----
    EvidenceWarning
        When independent groups disagree beyond their within-group errors (a sign of modes the
        populations do not cross between), when stepping-stone and thermodynamic integration
        disagree beyond their errors, on divergent trajectories, or when ``target_se`` was not
        reached.

    Notes
    -----
    1. Draw ``n_groups × n_particles`` particles from the prior (λ = 0).
    2. Choose the next λ (adaptive: bisection on the conditional ESS of exp(Δλ · log L)).
    3. Each group's stepping-stone increment is log Σ_i W_i exp(Δλ log L_i) (eq. 4), with W its
       normalised weights; reweight; resample groups whose ESS fell below the threshold.
    4. Move all particles by HMC at the new λ, with the mass matrix estimated from the weighted
       population (dense or diagonal, see ``mass_matrix``), until they have decorrelated.
    5. Repeat from 2 until λ = 1. Each group gives an unbiased evidence estimate; they are averaged
       on the evidence scale, and the SE is the larger of the between-group spread and the
       within-group error propagated from the stages (posteriors with separated modes make the
       first much larger than the second, and that is reported). Groups whose log estimates
       spread by σ nats imply an SE of about log(1 + √(expm1(σ²)/G)) (the lognormal law of
       SMC estimates), which the SE never undercuts: an average that one group dominates is not
       reported as precise.

    References
    ----------
    Barber, D. and Bishop, C. M. (1997). Bayesian model comparison by Monte Carlo chaining.
    NIPS 9.
    Bérard, J., Del Moral, P. and Doucet, A. (2014). A lognormal central limit theorem for
    particle approximations of normalizing constants. Electronic Journal of Probability 19.
    Friel, N., Hurn, M. and Wyse, J. (2014). Improving power posterior estimation of statistical
    evidence. Statistics and Computing 24, 709–723.
    Zhou, Y., Johansen, A. M. and Aston, J. A. D. (2016). Toward automatic model comparison: an
    adaptive sequential Monte Carlo approach. JCGS 25, 701–726.

    Examples
    --------
    >>> import numpy as np, pymc as pm, pymc_evidence as pm_evidence
    >>> with pm.Model() as model:
    ...     mu = pm.Normal("mu", 0, 1)
    ...     pm.Normal("y", mu, 1, observed=[0.3, -0.1, 0.4])
    ...     result = pm_evidence.thermodynamic(random_seed=1, progressbar=False)
    >>> round(result.log_evidence, 1)  # exact: -3.9886...
    -4.0
    """
    ladder = _validate(
        n_particles, n_groups, target_se, max_groups, ladder, target_cess, resample_threshold
    )
    if mass_matrix not in ("auto", "dense", "diag"):
        raise ValueError(f"mass_matrix must be 'auto', 'dense' or 'diag', got {mass_matrix!r}")
    if int(max_transitions) != max_transitions or max_transitions < 1:
        raise ValueError(f"max_transitions must be a positive integer, got {max_transitions!r}")
    if not 0 <= decorrelation < 1:
        raise ValueError(f"decorrelation must be in [0, 1), got {decorrelation!r}")
    if cores is not None and (int(cores) != cores or cores < 1):
        raise ValueError(f"cores must be a positive integer or None, got {cores!r}")
    model = pm.modelcontext(model)
    settings = dict(
        target_se=target_se, n_particles=int(n_particles), n_groups=int(n_groups),
        max_groups=int(max_groups), adaptive_ladder=ladder is None, target_cess=target_cess,
        resample_threshold=resample_threshold, target_accept=target_accept,
        trajectory_length=trajectory_length, max_leapfrog=max_leapfrog, decorrelation=decorrelation,
        max_transitions=max_transitions, mass_matrix=mass_matrix, backend=backend,
        ladder=None if ladder is None else ladder.tolist(),
        mlp_layers=None,
    )
    options = dict(
        target_cess=target_cess,
        resample_threshold=resample_threshold,
        kernel=dict(target_accept=target_accept, trajectory_length=trajectory_length,
                    max_leapfrog=max_leapfrog, decorrelation=decorrelation, max_transitions=max_transitions),
    )
    rng = np.random.default_rng(random_seed)
    start = time.perf_counter()
    density = get_density(model, backend=backend)
    compiled = time.perf_counter()
    options["layers"] = as_layers(mlp_layers, density)
    settings["mlp_layers"] = [vars(layer) for layer in options["layers"]] or None
    options["dense_mass"] = mass_matrix == "dense" or (
        mass_matrix == "auto" and density.dim <= DENSE_MASS_MAX_DIM
    )

    store = _Checkpoint(checkpoint, settings, density, random_seed)
    rounds = store.load(rng)
    bar = _ProgressBar(progressbar)

    with one_blas_thread():
        if not (rounds and rounds[0].stages and rounds[0].stages[-1].lam == 1.0):
            bar.new_round(1)

            def save(current):
                rounds[:] = [current]
                store.save(rng, rounds)

            first = rounds[0] if rounds else None
            rounds[:] = [_run_round(rng, density, n_groups, n_particles, ladder, None, options,
                                    bar.update, partial=first, on_stage=save)]
        first_seconds = time.perf_counter() - compiled
        ladder = np.array([0.0] + [s.lam for s in rounds[0].stages])
        tuning = [s.move for s in rounds[0].stages]
        estimate = _combine_stepping_stone(*_increments(rounds[:1]))
        groups = n_groups
        if target_se is not None and estimate.se > target_se and groups < max_groups:
            wanted = int(np.ceil(groups * (estimate.se / target_se) ** 2 * 1.1))
            extra = min(wanted, max_groups) - groups
            chunk_args = dict(n_particles=n_particles, ladder=ladder, tuning=tuning,
                              options=options)
            rounds[1:] = _run_chunks(
                rng, store, rounds, model, density, backend, _chunk_sizes(extra, n_groups),
                chunk_args, cores, first_seconds * extra / n_groups, bar,
            )
            groups += extra
    bar.close()
    sampled = time.perf_counter()

    log_ratio, log_ratio_var = _increments(rounds)
    ss = _combine_stepping_stone(log_ratio, log_ratio_var)
    ti = _integration(rounds, ladder, n_particles)
    messages: list[str] = []
    _check(messages, ss, ti, log_ratio_var, rounds, target_se, n_particles)

    posterior, sample_stats = _final_draws(rng, density, rounds, n_particles)
    # A resumed run's cost includes the sampling its checkpoint records from earlier sessions.
    timing = {"compile": compiled - start, "sampling": store.earlier + sampled - compiled,
              "earlier_sessions": store.earlier}
    timing["total"] = time.perf_counter() - start + store.earlier
    return EvidenceResult(
        method="thermodynamic",
        log_evidence=ss.log_evidence,
        se=ss.se,
        model_name=model.name,
        diagnostics=_diagnostics(rounds, log_ratio, log_ratio_var),
        posterior=posterior,
        sample_stats=sample_stats,
        trace=_trace(rounds[0]),
        estimates={
            "ti": ti.log_evidence, "ti_se": ti.se, "se_within": ss.se_within,
            "se_between": ss.se_between,
            "group_log_sd": float(np.std(ss.per_group[np.isfinite(ss.per_group)], ddof=1))
            if groups > 1 else np.nan,
            "n_stages": len(ladder) - 1, "n_groups": groups,
        },
        settings=settings,
        timing=timing,
        warnings=messages,
    )


def _chunk_sizes(extra: int, size: int) -> list[int]:
    """Groups per chunk of the extra groups: ``size`` each, the last one the rest."""
    return [min(size, extra - start) for start in range(0, extra, size)]


#: A chunk worker's compiled density, set once per worker process by :func:`_init_chunk_worker`.
_worker_density = None


def _init_chunk_worker(payload: bytes) -> None:
    """Compile the density once per worker: the model travels as cloudpickle bytes
    (PyTensor's on-disk cache makes the compile cheap after the main process's)."""
    global _worker_density
    model, backend = cloudpickle.loads(payload)
    _worker_density = get_density(model, backend=backend)


def _run_chunk(seed, n_groups, args) -> _Round:
    """Worker side of a parallel chunk."""
    with one_blas_thread():
        return _run_round(np.random.default_rng(seed), _worker_density, n_groups,
                          progress=_ignore, **args)


def _ignore(*args) -> None:
    return None


def _run_chunks(rng, store, rounds, model, density, backend, sizes, args, cores, expected, bar):
    """The extra groups, as independent chunks of their own seeds; returns them in order.

    The seeds are drawn from ``rng`` as the first round left it, and that state is what the
    checkpoint keeps with the finished chunks: a resumed run draws the same seeds, skips the
    chunks it has and reruns only the others (a chunk is saved when it is finished).
    """
    resume_rng = copy.deepcopy(rng)
    seeds = rng.integers(2**63, size=len(sizes))
    saved = (list(rounds[1:]) + [None] * len(sizes))[: len(sizes)]
    chunks = [
        chunk if chunk is not None and chunk.stages and chunk.stages[-1].lam == 1.0
        and chunk.final_log_weights.shape[0] == size else None
        for chunk, size in zip(saved, sizes)
    ]

    def finished(index, chunk):
        chunks[index] = chunk
        store.save(resume_rng, [rounds[0], *chunks])

    todo = [i for i, chunk in enumerate(chunks) if chunk is None]
    fork = fork_is_safe()
    if cores is None:
        # Automatic only where no main-script guard is needed, and not inside a worker process
        # (e.g. of compare's executor), whose caller already keeps the CPUs busy.
        parallel = fork and multiprocessing.parent_process() is None
        cores = usable_cpus() if parallel and expected > PARALLEL_MIN_SECONDS else 1
    if multiprocessing.current_process().daemon:  # daemonic processes cannot have children
        cores = 1
    workers = min(cores, len(todo))
    if workers <= 1:
        for i in todo:
            bar.new_round(i + 2)
            chunk = _run_round(np.random.default_rng(seeds[i]), density, sizes[i],
                               progress=bar.update, **args)
            finished(i, chunk)
        return chunks
    pool = local_pool(workers, fork=fork, initializer=_init_chunk_worker,
                      initargs=(cloudpickle.dumps((model, backend)),))
    failed = True
    try:
        futures = {pool.submit(_run_chunk, seeds[i], sizes[i], args): i for i in todo}
        for future in as_completed(futures):
            index, chunk = futures[future], future.result()
            finished(index, chunk)
            bar.new_round(index + 2)
            bar.update(1.0, chunk.stages)
        failed = False
    finally:
        stop_pool(pool, failed)
    return chunks


def _trace(first_round: _Round) -> pd.DataFrame:
    """Per-transition log prior and log likelihood of the tracked chains, in long format."""
    frames = []
    for k, stage in enumerate(first_round.stages):
        n_transitions, n_traced = stage.move.traced_log_likelihood.shape
        frames.append(
            pd.DataFrame(
                {
                    "stage": k,
                    "lambda": stage.lam,
                    "transition": np.repeat(np.arange(n_transitions), n_traced),
                    "chain": np.tile(np.arange(n_traced), n_transitions),
                    "log_prior": stage.move.traced_log_prior.ravel(),
                    "log_likelihood": stage.move.traced_log_likelihood.ravel(),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def _increments(rounds):
    """Per-group, per-stage stepping-stone increments and their variances (arrays G×S)."""
    log_ratio = np.concatenate([np.stack([s.log_ratio for s in r.stages], axis=1) for r in rounds])
    var = np.concatenate([np.stack([s.log_ratio_var for s in r.stages], axis=1) for r in rounds])
    return log_ratio, var


def _integration(rounds, ladder, n_particles) -> _Estimate:
    mean_ll = np.concatenate(
        [np.column_stack([r.prior_mean_ll] + [s.mean_ll for s in r.stages]) for r in rounds]
    )
    var_ll = np.concatenate(
        [np.column_stack([r.prior_var_ll] + [s.var_ll for s in r.stages]) for r in rounds]
    )
    return _combine_integration(ladder, mean_ll, var_ll, n_particles)


def _check(messages, ss, ti, log_ratio_var, rounds, target_se, n_particles) -> None:
    """Turn soft problems into warnings on the result."""
    G = ss.per_group.size
    if not np.all(np.isfinite(ss.per_group)):
        warn(
            messages,
            f"{int(np.sum(~np.isfinite(ss.per_group)))} of {G} groups have a non-finite evidence "
            "estimate (every particle of a group had zero likelihood at some stage): the estimate "
            "rests on the other groups; check the likelihood's support.",
        )
    collapsed = [
        (k, stage.lam, stage.ess) for k, stage in enumerate(rounds[0].stages)
        if stage.ess < 0.1 * n_particles
    ]
    if collapsed:
        k, lam, ess = min(collapsed, key=lambda row: row[2])
        warn(
            messages,
            f"the incremental weights' ESS collapsed at {len(collapsed)} stage(s), down to "
            f"{ess:.1f} of {n_particles} particles at stage {k} (λ = {lam:.4g}): that stage's "
            "ratio is unreliable; add rungs there (a finer ladder, or the adaptive one).",
        )
    within_var = log_ratio_var.sum(axis=1)
    spread = np.sum((ss.per_group - np.mean(ss.per_group)) ** 2 / np.maximum(within_var, 1e-300))
    # The within-group error ignores the correlation that resampling creates, so it runs low by
    # a modest factor even on unimodal posteriors; separated modes make the spread far larger.
    if G > 1 and chi2.sf(spread, G - 1) < 1e-3 and ss.se_between > 2 * ss.se_within:
        warn(
            messages,
            f"independent groups disagree beyond their within-group errors (group estimates "
            f"span {np.ptp(ss.per_group):.2f} nats): the posterior likely has modes the "
            "tempered populations do not cross between. The SE includes the spread; run more "
            "groups (larger target_se budget, max_groups) or longer moves (max_transitions).",
        )
    if np.isfinite(ti.log_evidence) and abs(ss.log_evidence - ti.log_evidence) > 3 * np.hypot(
        ss.se, ti.se
    ):
        warn(
            messages,
            f"stepping-stone ({ss.log_evidence:.3f} ± {ss.se:.3f}) and thermodynamic integration "
            f"({ti.log_evidence:.3f} ± {ti.se:.3f}) disagree beyond their errors: the ladder may "
            "be too coarse (raise target_cess) or the moves too short.",
        )
    divergences = sum(s.move.divergences for r in rounds for s in r.stages)
    transitions = sum(
        s.move.n_transitions * r.final_state.position.shape[0] for r in rounds for s in r.stages
    )
    # A divergent trajectory is rejected, which keeps every rung's target invariant: it costs
    # mixing, not correctness, so only a large share is worth a warning.
    if divergences > 0.1 * transitions:
        warn(
            messages,
            f"{divergences} of {transitions} HMC trajectories diverged: the tempered posteriors "
            "have regions of high curvature the moves cannot enter; consider reparameterising "
            "(e.g. non-centred hierarchies).",
        )
    if target_se is not None and ss.se > target_se:
        warn(
            messages,
            f"target_se={target_se} not reached (SE {ss.se:.3f}) within max_groups; raise "
            "max_groups or n_particles.",
        )


def _final_draws(rng, density, rounds, n_particles):
    """Particles at λ = 1, resampled to equal weights, as (chain=group, draw) arrays."""
    positions, log_lik, log_prior = [], [], []
    for r in rounds:
        G = r.final_log_weights.shape[0]
        index = np.concatenate(
            [g * n_particles + _systematic_resample(rng, r.final_log_weights[g]) for g in range(G)]
        )
        positions.append(r.final_state.position[index])
        log_lik.append(r.final_state.log_likelihood[index])
        log_prior.append(r.final_state.log_prior[index])
    positions = np.concatenate(positions)
    G = positions.shape[0] // n_particles
    constrained = density.to_constrained(positions)
    posterior = {
        name: value.reshape((G, n_particles, *value.shape[1:])) for name, value in constrained.items()
    }
    sample_stats = {
        "log_likelihood": np.concatenate(log_lik).reshape(G, n_particles),
        "log_prior": np.concatenate(log_prior).reshape(G, n_particles),
    }
    return posterior, sample_stats


class _Checkpoint:
    """Atomic per-stage saves of a run's rounds and random state, and their reloading.

    Each save also records the sampling seconds spent on the run so far, over every session
    (``earlier`` holds those of the sessions before this one once loaded).
    """

    def __init__(self, path, settings, density, random_seed):
        self.path = None if path is None else Path(path)
        self.earlier = 0.0
        self.started = time.perf_counter()
        seed = random_seed if isinstance(random_seed, (int, np.integer, type(None))) else "generator"
        # "format" changes whenever what a checkpoint holds does (2: HMC transitions per stage).
        self.key = json.dumps(
            {"format": 2, "settings": settings, "names": density.names, "dim": density.dim,
             "model": density.model.name, "seed": None if seed is None else str(seed)},
            sort_keys=True, default=str,
        )

    def load(self, rng) -> list:
        if self.path is None or not self.path.exists():
            return []
        with open(self.path, "rb") as file:
            try:
                saved = pickle.load(file)
            except (TypeError, AttributeError, EOFError, pickle.UnpicklingError) as err:
                raise ValueError(
                    f"checkpoint {self.path} cannot be read ({err}): it was written by another "
                    "version of pymc-evidence, or is damaged; delete it or pass another "
                    "checkpoint path"
                ) from err
        if saved["key"] != self.key:
            raise ValueError(
                f"checkpoint {self.path} was written by a run with other settings or another "
                "model; delete it or pass another checkpoint path"
            )
        rng.bit_generator.state = saved["rng"]
        self.earlier = saved.get("sampling_seconds", 0.0)
        return saved["rounds"]

    def save(self, rng, rounds) -> None:
        if self.path is None:
            return
        temporary = self.path.with_name(self.path.name + ".tmp")
        with open(temporary, "wb") as file:
            seconds = self.earlier + time.perf_counter() - self.started
            pickle.dump({"key": self.key, "rng": rng.bit_generator.state, "rounds": rounds,
                         "sampling_seconds": seconds}, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, self.path)


@functools.cache
def _quiet_tqdm():
    """tqdm without its monitor thread (a running thread makes forking workers unsafe)."""
    from tqdm.auto import tqdm

    return type("QuietTqdm", (tqdm,), {"monitor_interval": 0})


class _ProgressBar:
    """PyMC-style progress: λ from 0 to 1, with the running log-evidence."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.bar = None
        self.round = 1

    def new_round(self, number: int) -> None:
        self.close()
        self.round = number

    def update(self, lam: float, stages: list) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            self.bar = _quiet_tqdm()(total=1.0, desc=f"Tempering (round {self.round})",
                            bar_format="{desc}: {percentage:3.0f}%|{bar}| {postfix} [{elapsed}]")
        self.bar.update(lam - self.bar.n)
        log_z = float(np.mean([sum(s.log_ratio.mean() for s in stages)]))
        self.bar.set_postfix_str(f"stage {len(stages)}, λ={lam:.4g}, log Z≈{log_z:.2f}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
