"""Tempered sequential Monte Carlo: particle populations carried from the prior to the posterior.

The machinery of thermodynamic chaining apart from its estimator maths: the ladder of
temperatures λ (fixed, or the next λ chosen for a target conditional ESS), the incremental
weights of each stage, resampling within groups, alignment of MLP symmetry copies, the HMC
moves, and the particles at λ = 1. One *round* runs G independent groups of n particles on one
ladder; it records per stage what :mod:`._stepping_stone` combines into the evidence.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
from scipy.optimize import brentq
from scipy.special import logsumexp

from pymc_evidence import _compat, kernels
from pymc_evidence.density import check_prior_draws
from pymc_evidence.symmetry import alignment_map, is_nearest_copy, symmetrised_covariance

__all__ = ["power_ladder", "Stage", "Round", "run_round", "align_population", "final_draws"]



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



class Stage(NamedTuple):
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



class Round(NamedTuple):
    prior_mean_ll: np.ndarray  # (G,)
    prior_var_ll: np.ndarray  # (G,)
    stages: list
    final_state: kernels.HMCState
    final_log_weights: np.ndarray  # (G, n)



def _weighted_moments(values: np.ndarray, log_weights: np.ndarray):
    """Per-group weighted mean and variance, ignoring particles of zero weight (a group with
    a weighted value of −inf has mean −inf and variance NaN)."""
    weights = np.exp(log_weights)
    safe = np.where(weights > 0, values, 0.0)
    mean = np.sum(weights * safe, axis=1)
    with np.errstate(invalid="ignore"):
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



def align_population(density, layers, state: kernels.HMCState,
                     reference: np.ndarray) -> kernels.HMCState:
    """Move every particle to its copy (under the MLP layers' symmetries) nearest ``reference``.

    The copies have the same density, so the move keeps every tempered target invariant; after
    it the population's covariance describes one copy of the posterior's modes instead of the
    spread over all 2^h·h! of them, and the metric built from it allows far longer steps.
    The symmetries are signed permutations, so gradients move with the positions. The moves
    that follow must commute with the symmetries (:func:`_symmetric_metric`), or stay in the
    reference's domain (``symmetry.is_nearest_copy``), for the law of the functions the
    particles compute to stay right.
    """
    index, signs = alignment_map(density, layers, reference, state.position)

    def move(values):
        return signs * np.take_along_axis(values, index, axis=1)

    return state._replace(
        position=move(state.position),
        grad_log_prior=move(state.grad_log_prior),
        grad_log_likelihood=move(state.grad_log_likelihood),
    )



def run_round(
    rng, density, n_groups, n_particles, ladder, tuning, round_settings, progress,
    partial=None, on_stage=None,
):
    """One tempered SMC run of ``n_groups`` independent groups sharing one ladder.

    With ``ladder=None`` the ladder is built adaptively from the pooled population. ``tuning``
    (from the first round, on the same ladder) gives each stage's step size and number of HMC
    transitions; without it the step size adapts within the round and each stage makes the
    transitions the previous stage suggested (the first ``max_transitions``). ``partial``
    (a :class:`Round` whose last stage has λ < 1) continues an interrupted round;
    ``on_stage`` is called with the round so far after every finished stage.
    """
    G, n = n_groups, n_particles
    if partial is None:
        state = kernels.init(density, density.prior_draws(rng, G * n))
        if tuning is None:
            # Later rounds run on a density the first round checked; their groups that draw
            # no particle of positive likelihood are dead groups, not an impossible model.
            check_prior_draws(density, state.position, state.log_prior, state.log_likelihood)
        log_weights = np.full((G, n), -np.log(n))
        prior_mean_ll, prior_var_ll = _weighted_moments(
            state.log_likelihood.reshape(G, n), log_weights
        )
        step_size = tuning[0].step_size if tuning else 1.0 / density.dim**0.25
        n_transitions = round_settings["kernel"]["max_transitions"]
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
            new_lam = _next_lambda(log_weights, ll, lam, round_settings["target_cess"])
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
        to_resample = np.flatnonzero(group_ess < round_settings["resample_threshold"] * n)
        if to_resample.size:
            index = np.arange(G * n)
            for g in to_resample:
                index[g * n : (g + 1) * n] = g * n + _systematic_resample(rng, log_weights[g])
                log_weights[g] = -np.log(n)
            state = _take(state, index)

        weights = np.exp(log_weights.ravel())
        if not weights.any():  # every group dead (Z = 0): any metric serves the moves left
            weights = np.ones_like(weights)
        support, layers = None, round_settings["layers"]
        if layers:
            reference = round_settings["anchor"]
            if reference is None:
                reference = state.position[np.argmax(weights)]
            state = align_population(density, layers, state, reference)
            if not round_settings["symmetric_moves"]:
                support = functools.partial(is_nearest_copy, density, layers, reference)
        metric = kernels.Metric.from_population(
            state.position, weights / weights.sum(), round_settings["dense_mass"],
            gradients=state.grad_log_prior + lam * state.grad_log_likelihood,
        )
        if layers and round_settings["symmetric_moves"]:
            metric = _symmetric_metric(density, layers[0], metric)
        if tuning:
            step_size, n_transitions = tuning[k].step_size, tuning[k].suggested_transitions
        state, move = kernels.mutate(
            rng, state, density, lam, metric, step_size, n_transitions=n_transitions,
            support=support, **round_settings["kernel"],
        )
        step_size, n_transitions = move.step_size, move.suggested_transitions
        ll = state.log_likelihood.reshape(G, n)
        mean_ll, var_ll = _weighted_moments(ll, log_weights)
        mean_ll[dead], var_ll[dead] = np.nan, np.nan
        rhat = _rhat(ll) if G > 1 else np.nan
        stages.append(
            Stage(lam, log_ratio, log_ratio_var, ess, mean_ll, var_ll, rhat,
                   to_resample.size / G, move)
        )
        progress(lam, stages)
        if on_stage is not None:
            on_stage(Round(prior_mean_ll, prior_var_ll, stages, state, log_weights))
    return Round(prior_mean_ll, prior_var_ll, stages, state, log_weights)



def _symmetric_metric(density, layer, metric: kernels.Metric) -> kernels.Metric:
    """``metric`` averaged over the layer's symmetries (:func:`symmetrised_covariance`)."""
    if metric.cov is None:
        variances = np.diag(symmetrised_covariance(density, layer, np.diag(metric.variances)))
        return kernels.Metric.from_estimate(variances.copy())
    cov = symmetrised_covariance(density, layer, metric.cov)
    return kernels.Metric.from_estimate(np.diag(cov).copy(), cov)


def _rhat(values: np.ndarray) -> float:
    """Rank-normalised R-hat of a per-stage statistic, with groups as chains."""
    finite = values[:, np.all(np.isfinite(values), axis=0)]
    if finite.shape[1] < 4:
        return np.nan
    return _compat.rhat(finite)



def final_draws(rng, density, rounds, n_particles):
    """Particles at λ = 1, resampled to equal weights, as (chain=group, draw) arrays.

    Dead groups (every particle of zero likelihood at some stage, Ẑ_g = 0) hold no draw of
    the posterior and are left out, unless every group is dead.
    """
    positions, log_lik, log_prior = [], [], []
    live = [np.flatnonzero(np.isfinite(r.final_log_weights).any(axis=1)) for r in rounds]
    if not any(groups.size for groups in live):
        live = [np.arange(r.final_log_weights.shape[0]) for r in rounds]
    for r, groups in zip(rounds, live):
        if not groups.size:
            continue
        index = np.concatenate(
            [g * n_particles + _systematic_resample(rng, r.final_log_weights[g]) for g in groups]
        )
        positions.append(r.final_state.position[index])
        log_lik.append(r.final_state.log_likelihood[index])
        log_prior.append(r.final_state.log_prior[index])
    positions = np.concatenate(positions)
    model_log_densities = getattr(density, "model_log_densities", None)
    if model_log_densities is not None:  # tempered from a reference: report the model's own
        model_prior, model_likelihood = model_log_densities(positions)
        log_prior, log_lik = [model_prior], [model_likelihood]
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
