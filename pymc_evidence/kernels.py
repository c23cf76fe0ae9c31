"""Vectorised Hamiltonian Monte Carlo over a population of chains at a temperature λ.

The target of every chain is the tempered posterior

.. math:: \\log \\pi_\\lambda(\\theta) = \\log p(\\theta) + \\lambda \\log L(\\theta)

(Barber & Bishop 1997, eq. 9 with E = −log π). One leapfrog step of all K chains is one call of
the batched density, so there is no Python loop over chains. The kernel is pure: a state goes
in, a new state and per-chain information come out (BlackJAX's ``init``/``step`` shape).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from scipy.linalg import solve_triangular

from pymc_evidence.density import DensityValues
from pymc_evidence.scale_moves import TARGET_ACCEPTANCE, initial_widths, scale_step

__all__ = [
    "HMCState", "HMCInfo", "Metric", "MutationStats", "init", "hmc_step", "mutate", "tempered",
    "adapt_step_size", "leapfrog_steps",
]

#: An energy error beyond this (nats) marks a trajectory as divergent.
DIVERGENCE_THRESHOLD = 1000.0


class HMCState(NamedTuple):
    """Positions of K chains with their density values, so nothing is recomputed."""

    position: np.ndarray  # (K, d), unconstrained
    log_prior: np.ndarray  # (K,)
    log_likelihood: np.ndarray  # (K,)
    grad_log_prior: np.ndarray  # (K, d)
    grad_log_likelihood: np.ndarray  # (K, d)

    def where(self, accepted: np.ndarray, position: np.ndarray, values) -> HMCState:
        """The state with the chains where ``accepted`` (K,) moved to ``position`` (their
        :class:`~pymc_evidence.density.DensityValues` ``values``), the others unchanged."""
        keep = accepted[:, None]
        return HMCState(
            np.where(keep, position, self.position),
            np.where(accepted, values.log_prior, self.log_prior),
            np.where(accepted, values.log_likelihood, self.log_likelihood),
            np.where(keep, values.grad_log_prior, self.grad_log_prior),
            np.where(keep, values.grad_log_likelihood, self.grad_log_likelihood),
        )


class HMCInfo(NamedTuple):
    """Per-chain outcome of one HMC transition."""

    acceptance_rate: np.ndarray  # (K,) min(1, exp(-ΔH)), whatever the support says
    accepted: np.ndarray  # (K,) bool
    divergent: np.ndarray  # (K,) bool: non-finite or ΔH > DIVERGENCE_THRESHOLD
    energy_change: np.ndarray  # (K,) ΔH of the proposal


class Metric(NamedTuple):
    """The kinetic energy's metric: the inverse mass matrix M⁻¹, an estimate of the target's
    covariance Σ, either diagonal (``variances``) or dense (``cov`` with ``chol_inv`` = L⁻¹
    for Σ = LLᵀ).

    Momenta are p ~ N(0, M) = N(0, Σ⁻¹), the velocity is Σp, the kinetic energy ½ pᵀΣp.
    """

    variances: np.ndarray  # (d,) diagonal of Σ
    cov: np.ndarray | None = None  # (d, d) dense Σ
    chol_inv: np.ndarray | None = None  # (d, d) inverse of Σ's lower Cholesky factor

    @classmethod
    def from_population(cls, positions, weights, dense: bool, gradients=None) -> "Metric":
        """Metric estimated from a weighted population (K×d, weights summing to 1).

        Without ``gradients``: the population's covariance. With ``gradients`` (of the log target
        at the positions): the geometric mean of the covariance of the positions, C_θ, and the
        inverse covariance of the gradients, C_g⁻¹ — on the diagonal √(Var θ_i / Var ∂_i log π)
        (nutpie's rule), densely C_θ # C_g⁻¹ = C_θ^{1/2} (C_θ^{1/2} C_g C_θ^{1/2})^{−1/2} C_θ^{1/2}.
        Both equal Σ for a Gaussian N(μ, Σ) (there C_g = Σ⁻¹). When the population spans
        separated modes (an MLP's permutation-symmetric posterior) C_θ holds the spread between
        modes while C_g sees each mode's own width; the mean lies between, and the step size no
        longer has to shrink to the narrowest mode across the whole spread.

        A dense estimate needs an effective population of at least twice the dimension (else
        the diagonal is used); each covariance is shrunk towards its diagonal by 5/(K_eff + 5),
        as Stan regularises its adapted metric.
        """
        effective = 1.0 / np.sum(weights**2)
        d = positions.shape[1]
        dense = dense and effective >= 2 * d
        shrink = 5.0 / (effective + 5.0)

        def covariance(values):
            centered = values - weights @ values
            variances = np.maximum(weights @ centered**2, 1e-300)
            if not dense:
                return variances, None
            cov = (centered * weights[:, None]).T @ centered
            return variances, (1 - shrink) * cov + shrink * np.diag(variances)

        if gradients is not None:
            # Particles of zero weight may sit where the density vanishes (gradient not finite);
            # any other non-finite gradient leaves the positions' covariance alone to decide.
            live = weights > 0
            gradients = (
                np.where(live[:, None], gradients, 0.0)
                if np.all(np.isfinite(gradients[live]))
                else None
            )
        variances, cov = covariance(positions)
        if gradients is not None:
            grad_variances, grad_cov = covariance(gradients)
            variances = np.sqrt(variances / grad_variances)
            if dense:
                cov = _geometric_mean_with_inverse(cov, grad_cov)
                if cov is None:
                    return cls(np.maximum(variances, 1e-10 * float(np.max(variances))))
                variances = np.diag(cov).copy()
        return cls.from_estimate(variances, cov)

    @classmethod
    def from_estimate(cls, variances, cov=None) -> "Metric":
        """Metric of an estimated covariance: dense ``cov`` (its ``variances`` the diagonal),
        or diagonal ``variances`` alone; a dense one that is not positive definite falls back
        to its diagonal."""
        variances = np.maximum(variances, 1e-10 * max(float(np.max(variances)), 1e-300))
        if cov is None:
            return cls(variances)
        try:
            chol = np.linalg.cholesky(cov)
        except np.linalg.LinAlgError:
            return cls(variances)
        return cls(variances, cov, solve_triangular(chol, np.eye(variances.size), lower=True))

    def sample_momentum(self, rng, n: int) -> np.ndarray:
        z = rng.standard_normal((n, self.variances.size))
        if self.cov is None:
            return z / np.sqrt(self.variances)
        return z @ self.chol_inv  # rows L⁻ᵀz: covariance L⁻ᵀL⁻¹ = Σ⁻¹

    def velocity(self, momentum: np.ndarray) -> np.ndarray:
        if self.cov is None:
            return self.variances * momentum
        return momentum @ self.cov

    def kinetic_energy(self, momentum: np.ndarray) -> np.ndarray:
        return 0.5 * np.sum(momentum * self.velocity(momentum), axis=1)


def _power(values, vectors, power):
    """A symmetric matrix from its eigendecomposition, eigenvalues raised to ``power``."""
    return (vectors * values**power) @ vectors.T


def _geometric_mean_with_inverse(cov, grad_cov):
    """C # G⁻¹ = C^{1/2} (C^{1/2} G C^{1/2})^{−1/2} C^{1/2}, or None if not positive definite."""
    values, vectors = np.linalg.eigh(cov)
    root = _power(np.maximum(values, 1e-300), vectors, 0.5)  # roundoff can dip below 0
    middle = root @ grad_cov @ root
    if not np.all(np.isfinite(middle)):
        return None
    values, vectors = np.linalg.eigh((middle + middle.T) / 2)
    if values[0] <= 0:
        return None
    mean = root @ _power(values, vectors, -0.5) @ root
    return (mean + mean.T) / 2


def init(density, positions: np.ndarray) -> HMCState:
    """Evaluate ``density`` at ``positions`` (K×d) once and wrap them in a state."""
    positions = np.array(positions, dtype=float, copy=True)
    return HMCState(positions, *density(positions))


def tempered(values: DensityValues | HMCState, lam: float):
    """Log target and its gradient at temperature ``lam``."""
    with np.errstate(invalid="ignore"):
        logp = values.log_prior + lam * values.log_likelihood
        grad = values.grad_log_prior + lam * values.grad_log_likelihood
    return logp, grad


def hmc_step(
    rng: np.random.Generator,
    state: HMCState,
    density,
    lam: float,
    step_size: np.ndarray | float,
    metric: Metric,
    n_leapfrog: int,
    support=None,
) -> tuple[HMCState, HMCInfo]:
    """One HMC transition of every chain, targeting ``log p + lam * log L``.

    Parameters
    ----------
    rng : numpy.random.Generator
    state : HMCState
    density : callable
        Batched density, ``density(X) -> DensityValues`` (e.g. :class:`~pymc_evidence.density.ModelDensity`).
    lam : float
        Temperature λ in [0, 1].
    step_size : float or ndarray (K,)
        Leapfrog step size, per chain if an array (jittered step sizes avoid resonances).
    metric : Metric
        Inverse mass matrix (an estimate of the target's covariance), diagonal or dense.
    n_leapfrog : int
        Leapfrog steps per trajectory.
    support : callable, optional
        ``support(X) -> bool (K,)``: proposals outside this set are rejected, so the chains
        target π_λ restricted to it (the leapfrog map stays a volume-preserving involution, and
        the restricted density is zero outside). Chains must start inside.

    Returns
    -------
    (HMCState, HMCInfo)

    Notes
    -----
    Momenta p ~ N(0, M); Hamiltonian H = −log π_λ(θ) + ½ pᵀ M⁻¹ p.
    A proposal with non-finite density (outside the support, overflow) is rejected for that chain
    only; it cannot affect the others.
    """
    if n_leapfrog < 1:
        raise ValueError(f"n_leapfrog must be at least 1, got {n_leapfrog}")
    K = state.position.shape[0]
    eps = np.broadcast_to(np.asarray(step_size, dtype=float), (K,))[:, None]
    momentum = metric.sample_momentum(rng, K)
    logp0, grad = tempered(state, lam)
    kinetic0 = metric.kinetic_energy(momentum)

    position = state.position
    with np.errstate(invalid="ignore", over="ignore"):
        momentum = momentum + 0.5 * eps * grad
        for step in range(n_leapfrog):
            position = position + eps * metric.velocity(momentum)
            values = density(position)
            _, grad = tempered(values, lam)
            if step < n_leapfrog - 1:
                momentum = momentum + eps * grad
        momentum = momentum + 0.5 * eps * grad
        logp1, _ = tempered(values, lam)
        kinetic1 = metric.kinetic_energy(momentum)
        energy_change = (kinetic1 - logp1) - (kinetic0 - logp0)

    finite = np.isfinite(energy_change) & np.isfinite(logp1)
    finite &= np.all(np.isfinite(grad), axis=1)
    log_accept = np.where(finite, np.minimum(0.0, -energy_change), -np.inf)
    accepted = np.log(rng.uniform(size=K)) < log_accept
    if support is not None and accepted.any():
        accepted[accepted] = support(position[accepted])
    # Only an energy *gain* diverges (Stan's rule): a large drop is accepted, not a failure.
    divergent = ~finite | (np.where(finite, energy_change, 0.0) > DIVERGENCE_THRESHOLD)

    new_state = state.where(accepted, position, values)
    info = HMCInfo(np.exp(log_accept), accepted, divergent, energy_change)
    return new_state, info


def leapfrog_steps(rng: np.random.Generator, mean_steps: float, max_leapfrog: int) -> int:
    """A number of leapfrog steps drawn uniformly around ``mean_steps`` (±50 %, between 1 and
    ``max_leapfrog``): a random trajectory length avoids the periodic returns of a fixed one."""
    return int(
        np.clip(rng.integers(int(0.5 * mean_steps), int(1.5 * mean_steps) + 2), 1, max_leapfrog)
    )


def adapt_step_size(step_size: float, acceptance: float, target: float, rate: float = 1.5) -> float:
    """Multiplicative step-size update towards a target mean acceptance rate.

    ``log ε ← log ε + rate · (acceptance − target)``: a population of chains gives a precise
    acceptance estimate at every transition, so a simple Robbins–Monro-style step suffices.
    """
    return float(step_size * np.exp(rate * (acceptance - target)))


class MutationStats(NamedTuple):
    """What a run of HMC transitions at one temperature did."""

    acceptance: float  # mean acceptance rate over chains and transitions
    step_size: float  # adapted step size at the end
    n_leapfrog: int  # leapfrog steps of the last transition
    n_transitions: int
    divergences: int
    correlation: float  # remaining correlation with the starting population
    suggested_transitions: int  # transitions the next, similar run should make (see mutate)
    traced_log_prior: np.ndarray  # (n_transitions, n_traced) after each transition
    traced_log_likelihood: np.ndarray  # (n_transitions, n_traced)
    scale_acceptance: float = np.nan  # mean acceptance of the scale moves (NaN: none ran)


def _correlation(start: np.ndarray, now: np.ndarray) -> float:
    """Mean absolute correlation across chains between columns of ``start`` and ``now``."""
    with np.errstate(invalid="ignore", divide="ignore"):  # columns with −inf give NaN, dropped
        a = start - start.mean(axis=0)
        b = now - now.mean(axis=0)
        corr = np.sum(a * b, axis=0) / np.sqrt(np.sum(a**2, axis=0) * np.sum(b**2, axis=0))
    corr = np.abs(corr[np.isfinite(corr)])
    return float(np.mean(corr)) if corr.size else 0.0


def mutate(
    rng: np.random.Generator,
    state: HMCState,
    density,
    lam: float,
    metric: Metric,
    step_size: float,
    *,
    n_transitions: int | None = None,
    target_accept: float = 0.8,
    trajectory_length: float = 1.0,
    max_leapfrog: int = 64,
    decorrelation: float = 0.2,
    stall_rule: bool = True,
    max_transitions: int = 20,
    n_traced: int = 8,
    support=None,
    scale_pairs=(),
) -> tuple[HMCState, MutationStats]:
    """Move every chain by HMC at temperature ``lam``, a fixed number of transitions or until
    the population has decorrelated.

    The population counts as decorrelated once both the parameters (mean absolute correlation
    per coordinate, across chains) and the log likelihood have correlation below
    ``decorrelation`` with their values at the start, or once a high correlation stops falling
    (chains held in separate modes). A positive ``decorrelation`` is raised to twice the mean
    absolute correlation that K independent chains show by chance, 2·√(2/(πK)) (0.05 for
    K = 1024, 0.1 for K = 256): below that a population cannot be told from a decorrelated one.
    ``decorrelation=0`` switches the rule off, the stall test included; ``stall_rule=False``
    drops only the stall test. Populations aligned to one symmetry copy of an MLP need that:
    past the phase transition their correlation with the start falls by under a hundredth per
    transition, which the stall test takes for chains held in separate modes (on the
    robot-arm MLP with four hidden units it ended the stages after 3–5 transitions, and an
    estimate came out 4.6 nats below the same seed's with 20 transitions at every stage, its
    SE 0.93; ``benchmarks/results/mlp_transitions.md``). With
    ``n_transitions=None`` the transitions stop there (or at ``max_transitions``). That stop
    depends on where the moves went, so the kernel is no longer invariant for the tempered
    posterior, and evidence estimates built on it run low in high dimensions (0.2 nats at
    d = 100, ``benchmarks/results/metric_bias.md``). With
    ``n_transitions`` given, exactly that many transitions run, and ``suggested_transitions``
    reports where the population decorrelated — or, if it did not, 50 % more (at most
    ``max_transitions``) — for the next run at a nearby temperature to use: a non-anticipating
    choice that keeps every run's kernel fixed.

    With ``support`` (see :func:`hmc_step`) every transition targets the tempered posterior
    restricted to that set.

    With ``scale_pairs`` (:func:`pymc_evidence.scale_moves.find_scale_pairs`) every HMC
    transition is followed by one scale move per pair, which carries a non-centred scale and
    its block along the ridge that HMC follows slowly; their random-walk widths adapt to an
    acceptance of 0.44 after every transition, as the step size does.

    The step size adapts to ``target_accept`` after every transition. The number of leapfrog
    steps is drawn uniformly around ``trajectory_length / step_size`` (±50 %, at most
    ``max_leapfrog``): in units of the metric a Gaussian target is isotropic, and a random
    trajectory length avoids the periodic returns of a fixed one. The log prior and log
    likelihood of the first ``n_traced`` chains are recorded after every transition (Barber &
    Bishop's Fig. 1a trace).
    """
    start, start_ll = state.position, state.log_likelihood
    K = start.shape[0]
    if decorrelation > 0:
        decorrelation = max(decorrelation, 2 * np.sqrt(2 / (np.pi * K)))
    planned = max_transitions if n_transitions is None else int(n_transitions)
    acceptance, divergences, traced, history = [], 0, [], []
    widths, scale_acceptance = initial_widths(scale_pairs), []
    decorrelated_at = None
    for transition in range(1, planned + 1):
        n_leapfrog = leapfrog_steps(rng, trajectory_length / step_size, max_leapfrog)
        jitter = np.exp(rng.uniform(-0.1, 0.1, size=K))
        state, info = hmc_step(rng, state, density, lam, step_size * jitter, metric, n_leapfrog,
                               support)
        acceptance.append(float(np.mean(info.acceptance_rate)))
        divergences += int(np.sum(info.divergent))
        if scale_pairs:
            state, accepted = scale_step(rng, state, density, lam, scale_pairs, widths, support)
            widths = widths * np.exp(accepted - TARGET_ACCEPTANCE)
            scale_acceptance.append(float(np.mean(accepted)))
        traced.append((state.log_prior[:n_traced], state.log_likelihood[:n_traced]))
        step_size = adapt_step_size(step_size, acceptance[-1], target_accept)
        correlation = max(
            _correlation(start, state.position),
            _correlation(start_ll[:, None], state.log_likelihood[:, None]),
        )
        history.append(correlation)
        # Chains held in separate modes keep a high correlation with the start however long
        # they move: count them as done once it is high and no longer falls (by 2 % over two
        # transitions). Part of the rule, so off with it.
        stalled = (stall_rule and decorrelation > 0 and len(history) >= 3
                   and correlation > 0.5 and history[-1] > 0.98 * history[-3])
        if decorrelated_at is None and (correlation < decorrelation or stalled):
            decorrelated_at = transition
            if n_transitions is None:
                break
    if decorrelated_at is None:
        suggested = min(max_transitions, max(transition + 1, int(np.ceil(1.5 * transition))))
    else:
        suggested = decorrelated_at
    traced_prior, traced_lik = (np.array(values) for values in zip(*traced))
    stats = MutationStats(
        float(np.mean(acceptance)), step_size, n_leapfrog, transition, divergences, correlation,
        suggested, traced_prior, traced_lik,
        float(np.mean(scale_acceptance)) if scale_acceptance else np.nan,
    )
    return state, stats
