"""The evidence from a tempered run: stepping-stone and thermodynamic integration, and their SEs.

Pure functions of the per-group, per-stage records a round leaves (:mod:`._tempering`):
the stepping-stone product of evidence ratios (Barber & Bishop 1997, eq. 4–5) averaged over
independent groups on the evidence scale, thermodynamic integration with the Friel–Hurn–Wyse
correction, and the standard-error laws (within-group delta method, between-group spread,
log-normal tail bound, the Student widening of a spread from few groups, the bias bounds of
pooled effort levels).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import stats
from scipy.special import logsumexp

__all__ = ["Estimate", "stepping_stone", "student_factor", "reported_se", "lognormal_se",
           "thermodynamic_integration", "round_increments", "round_integration", "share_of",
           "pooled_levels_bias", "set_aside_level_bias"]


class Estimate(NamedTuple):
    log_evidence: float
    se: float
    se_within: float
    se_between: float
    per_group: np.ndarray


def stepping_stone(log_ratio: np.ndarray, log_ratio_var: np.ndarray) -> Estimate:
    """Stepping-stone estimate from per-group, per-stage increments (arrays G×S).

    Each group's evidence estimate Ẑ_g = Π_k r̂_gk is unbiased, so groups are averaged on the
    evidence scale: log Ẑ = log mean_g Ẑ_g. Its SE is the largest of the within-group error
    propagated from the stages' weights, the delta-method spread of the Ẑ_g between groups, and
    the heavy-tail bound of :func:`lognormal_se`.
    """
    per_group = log_ratio.sum(axis=1)
    G = per_group.size
    log_z = float(logsumexp(per_group) - np.log(G))
    relative = np.exp(per_group - log_z)
    within = float(np.sqrt(np.sum(relative**2 * log_ratio_var.sum(axis=1))) / G)
    if G > 1:
        between = max(float(np.std(relative, ddof=1) / np.sqrt(G)), lognormal_se(per_group))
    else:
        between = np.inf
    return Estimate(log_z, max(within, between), within, between, per_group)


def student_factor(groups: int) -> float:
    """t_{G−1}(0.975) / z(0.975): how much wider than a normal one a 95 % interval must be
    when its SE is the spread of G values (1.62 at G = 4, 1.21 at 8, 1.04 at 32)."""
    return float(stats.t.ppf(0.975, max(groups - 1, 1)) / stats.norm.ppf(0.975))


def reported_se(estimate: Estimate, groups: int | None = None) -> float:
    """The SE a result reports: max(within, c_G × between), c_G = :func:`student_factor`;
    with ``groups``, the one that many groups like the estimate's would give (both parts fall
    as 1/√groups, and c with the degrees of freedom).

    The between-group SE is right on average but rests on G − 1 degrees of freedom, so that
    ±2 of it covers the error like a Student t, 86 % of the time at the default four groups
    rather than 95 %; and ``target_se`` stops adding groups when the SE falls below it, which
    favours fits whose groups agreed by chance. Widening it by c_G makes ±1.96 SE a 95 %
    interval when the spread alone sets the SE (the Student quantile that Stein's 1945
    two-stage procedure also uses when a pilot's spread decides how many more to draw). The
    within-group error, from every particle, is not widened.
    """
    present = estimate.per_group.size
    groups = present if groups is None else groups
    widened = max(estimate.se_within, student_factor(groups) * estimate.se_between)
    return widened * float(np.sqrt(present / groups))


def lognormal_se(log_z_groups: np.ndarray) -> float:
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


def share_of(log_values: np.ndarray, members) -> float:
    """The share of the ``members`` (a boolean mask) in Σ exp(log_values); 0 when there are
    none or nothing is finite."""
    members = np.asarray(members, dtype=bool)
    if not members.any():
        return 0.0
    with np.errstate(invalid="ignore"):
        share = float(np.exp(logsumexp(log_values[members]) - logsumexp(log_values)))
    return share if np.isfinite(share) else 0.0


def pooled_levels_bias(move: float, noise: float, lower_share: float,
                       bias_shown: bool = False) -> float:
    r"""Bound on the bias of two pooled effort levels (chaining's particles or moves, nested
    sampling's slice moves), as an SE term: :math:`(1 + w) \sqrt{\max(0, \delta^2 - c^2)}`,
    or :math:`(1 + w)(|\delta| + c)` once the check has gone on past a doubling or ended its
    budget on a move beyond its band (``bias_shown``).

    If doubling the effort at least halves a bias, the bias left at the higher level is at most
    the true move m between the levels and the lower level's at most 2|m|, so the pooled
    estimate's, with weight w (``lower_share``) on the lower level, at most (1 + w)|m|; the
    measured move δ has noise c and δ² − c² estimates m² without bias. Where nothing has shown
    a bias that estimate is enough (with unbiased levels it keeps the SE calibrated). Once a
    doubling has moved the estimate, a bias is there and the bound must hold: δ² − c² falls
    short of m² whenever the noise hides part of the move, and with a 2-nat bias that halves
    half the estimates fell beyond 2 SE; |δ| + c, the move's upper limit to one SE of noise,
    left none (benchmarks/results/effort_check_coverage.md).
    """
    if bias_shown:
        return (1 + lower_share) * (abs(move) + noise)
    return (1 + lower_share) * float(np.sqrt(max(0.0, move**2 - noise**2)))


def set_aside_level_bias(estimate: float, se: float, first: float, first_se: float) -> float:
    r"""SE term for an effort check's first level L₀, set aside on one noisy comparison:
    :math:`\sqrt{\max(0, (\hat E - L_0)^2 - \mathrm{SE}^2 - \mathrm{SE}_0^2)}`.

    A check goes past its first doubling because the second level L₁ moved from L₀ by more
    than the band; the estimate Ê then pools the last two levels, the first of them chosen for
    having moved, so that noise alone draws Ê away from L₀. The last level is independent of
    that choice: when its move from L₀ is within the band too, L₀ may have been right, and the
    caller adds this term, the distance from Ê to L₀ beyond their noise. With unbiased levels
    (2 runs per check level against 16, runs' SE 0.33) a fifth of such estimates fell beyond
    2 SE without it and the bound of :func:`pooled_levels_bias` for a bias shown, none with
    them (benchmarks/results/effort_check_coverage.md).
    """
    return float(np.sqrt(max(0.0, (estimate - first) ** 2 - se**2 - first_se**2)))


def thermodynamic_integration(lambdas, mean_ll, var_ll, n_particles) -> Estimate:
    """Thermodynamic integration ∫₀¹ E_λ[log L] dλ per group (arrays G×(S+1)).

    Trapezoid rule with the Friel, Hurn & Wyse (2014) correction
    − Σ_k (Δλ_k)²/12 · (Var_{λ_k}[log L] − Var_{λ_{k−1}}[log L]).

    E_λ[log L] rises with λ (its derivative is Var_λ[log L]), so each interval's integral lies
    between Δλ_k E_{λ_{k−1}}[log L] and Δλ_k E_{λ_k}[log L]. For an integrand the rungs resolve,
    the corrected trapezoid sits well inside that bracket; when a corrected interval falls outside
    it by more than three Monte Carlo SEs, the rungs do not resolve the integrand (typically
    E_0[log L] diverges under a heavy-tailed prior, e.g. a half-Cauchy scale) and the estimate is
    NaN: a number from such a ladder would be arbitrary, however large its SE.
    """
    delta = np.diff(lambdas)
    with np.errstate(invalid="ignore"):
        trapezoid = delta * (mean_ll[:, 1:] + mean_ll[:, :-1]) / 2
        correction = delta**2 / 12 * (var_ll[:, 1:] - var_ll[:, :-1])
        corrected = trapezoid - correction
        noise = 3 * delta / 2 * np.sqrt((var_ll[:, 1:] + var_ll[:, :-1]) / n_particles)
        below = corrected < delta * mean_ll[:, :-1] - noise
        above = corrected > delta * mean_ll[:, 1:] + noise
    unresolved = np.any(below | above, axis=1)
    per_group = trapezoid.sum(axis=1) - correction.sum(axis=1)
    finite = np.isfinite(per_group)
    if not finite.any() or unresolved[finite].any():
        return Estimate(np.nan, np.nan, np.nan, np.nan, per_group)
    per_group, var_ll = per_group[finite], var_ll[finite]
    coefficient = np.zeros(len(lambdas))
    coefficient[1:] += delta / 2
    coefficient[:-1] += delta / 2
    within_var = np.sum(coefficient**2 * var_ll / n_particles, axis=1)
    G = per_group.size
    estimate = float(np.mean(per_group))
    within = float(np.sqrt(np.sum(within_var)) / G)
    between = float(np.std(per_group, ddof=1) / np.sqrt(G)) if G > 1 else np.inf
    return Estimate(estimate, max(within, between), within, between, per_group)


def round_increments(rounds):
    """Per-group, per-stage stepping-stone increments and their variances (arrays G×S)."""
    log_ratio = np.concatenate([np.stack([s.log_ratio for s in r.stages], axis=1) for r in rounds])
    var = np.concatenate([np.stack([s.log_ratio_var for s in r.stages], axis=1) for r in rounds])
    return log_ratio, var


def round_integration(rounds, ladder, n_particles) -> Estimate:
    mean_ll = np.concatenate(
        [np.column_stack([r.prior_mean_ll] + [s.mean_ll for s in r.stages]) for r in rounds]
    )
    var_ll = np.concatenate(
        [np.column_stack([r.prior_var_ll] + [s.var_ll for s in r.stages]) for r in rounds]
    )
    return thermodynamic_integration(ladder, mean_ll, var_ll, n_particles)
