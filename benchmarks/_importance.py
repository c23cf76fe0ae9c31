"""Importance sampling of an MLP's evidence: a reference that shares nothing with tempering,
nested sampling's constrained moves or the alignment of points to one symmetry copy.

The proposal is a mixture of multivariate t distributions fitted to posterior draws aligned to
one copy, made symmetric by averaging it over every signed permutation of the hidden units,

    q(θ) = (1 − ε) · mean_g q₀(g θ) + ε · p(θ),

with the prior p as a defensive component (ε = 0.1), so the weights p(θ) L(θ) / q(θ) are
bounded by L / ε. Ẑ = mean of the weights is unbiased whatever q is; its SE is the weights'
standard deviation over √n, reliable when their effective sample size is large. The posterior
draws only shape q (here: chaining's λ = 1 particles).
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy.cluster.vq import kmeans2
from scipy.linalg import solve_triangular
from scipy.special import gammaln, logsumexp

from pymc_evidence.symmetry import align_units, transform_units

#: Mixture components (by default), t degrees of freedom, covariance inflation, defensive
#: prior share.
COMPONENTS, DF, INFLATE, DEFENSIVE = 4, 5.0, 1.3, 0.1
#: Importance draws per estimate.
N_DRAWS = 400_000


def symmetry_group(density, layer, hidden_units: int) -> list:
    """Every signed permutation of the layer's units as ``(index, signs)`` on flat points:
    the copy of ``x`` is ``signs * x[index]``."""
    d = density.dim
    group = []
    for permutation in itertools.permutations(range(hidden_units)):
        index = np.rint(transform_units(density, layer, np.arange(d, dtype=float),
                                        permutation)).astype(int)
        flips = itertools.product((1.0, -1.0), repeat=hidden_units) if layer.sign_flips else [
            np.ones(hidden_units)]
        for signs in flips:
            group.append((index, transform_units(density, layer, np.ones(d),
                                                 np.arange(hidden_units), np.array(signs))))
    return group


class _Proposal:
    """The symmetrised t mixture fitted to aligned draws."""

    def __init__(self, aligned: np.ndarray, group: list, rng, components: int = COMPONENTS):
        n, self.d = aligned.shape
        _, labels = kmeans2(aligned, components, seed=rng, minit="++")
        self.components = []
        for k in range(components):
            members = aligned[labels == k]
            if len(members) >= 5 * self.d:  # enough for a covariance
                cov = np.cov(members.T) * INFLATE + 1e-9 * np.eye(self.d)
                self.components.append((len(members), members.mean(0), np.linalg.cholesky(cov)))
        counts = np.array([c[0] for c in self.components], dtype=float)
        self.log_weights = np.log(counts / counts.sum())
        self.group = group

    def _log_t(self, x, mean, chol):
        z = solve_triangular(chol, (x - mean).T, lower=True).T
        d = self.d
        return (gammaln((DF + d) / 2) - gammaln(DF / 2) - d / 2 * np.log(DF * np.pi)
                - np.log(np.diag(chol)).sum() - (DF + d) / 2 * np.log1p(np.sum(z**2, 1) / DF))

    def _log_q0(self, x):
        return logsumexp([w + self._log_t(x, m, c)
                          for w, (_, m, c) in zip(self.log_weights, self.components)], axis=0)

    def log_density(self, x):
        return (logsumexp([self._log_q0(signs * x[:, index]) for index, signs in self.group],
                          axis=0) - np.log(len(self.group)))

    def sample(self, rng, n):
        which = rng.choice(len(self.components), size=n, p=np.exp(self.log_weights))
        out = np.empty((n, self.d))
        for k, (_, mean, chol) in enumerate(self.components):
            rows = which == k
            z = rng.standard_normal((rows.sum(), self.d))
            out[rows] = mean + (z @ chol.T) * np.sqrt(DF / rng.chisquare(DF, rows.sum()))[:, None]
        # a uniformly drawn symmetry: x = g⁻¹ y has density mean_g q₀(g x)
        copy = rng.integers(len(self.group), size=n)
        for k, (index, signs) in enumerate(self.group):
            rows = copy == k
            inverse = np.empty((rows.sum(), self.d))
            inverse[:, index] = out[rows] * signs
            out[rows] = inverse
        return out


def importance_log_evidence(density, layer, hidden_units, posterior_draws, rng,
                            n_draws=N_DRAWS, chunk=20_000):
    """(log Ẑ, SE, ESS) by importance sampling; ``posterior_draws`` (m×d, unconstrained)
    shape the proposal."""
    log_prior, log_likelihood = density.log_densities(posterior_draws)
    reference = posterior_draws[np.argmax(log_prior + log_likelihood)]
    aligned = align_units(density, [layer], reference, posterior_draws)
    return importance_from_aligned(density, aligned, symmetry_group(density, layer, hidden_units),
                                   rng, n_draws, chunk)


def importance_from_aligned(density, aligned, group, rng, n_draws=N_DRAWS, chunk=20_000,
                            components=COMPONENTS):
    """(log Ẑ, SE, ESS) with the proposal, a mixture of ``components`` t distributions, fitted
    to draws ``aligned`` to one copy and made symmetric over ``group`` (see
    :func:`symmetry_group`). ``density`` needs ``log_densities(x)`` (log prior, log
    likelihood) and ``prior_draws(rng, n)``."""
    proposal = _Proposal(aligned, group, rng, components)
    log_w = []
    for start in range(0, n_draws, chunk):
        m = min(chunk, n_draws - start)
        from_prior = rng.binomial(m, DEFENSIVE)
        x = np.concatenate([proposal.sample(rng, m - from_prior),
                            density.prior_draws(rng, from_prior)])
        log_prior, log_likelihood = density.log_densities(x)
        log_q = np.logaddexp(np.log1p(-DEFENSIVE) + proposal.log_density(x),
                             np.log(DEFENSIVE) + log_prior)
        log_w.append(np.where(np.isfinite(log_likelihood), log_prior + log_likelihood - log_q,
                              -np.inf))
    log_w = np.concatenate(log_w)
    log_z = float(logsumexp(log_w) - np.log(log_w.size))
    w = np.exp(log_w - log_w.max())
    se = float(np.std(w) / np.mean(w) / np.sqrt(w.size))
    ess = float(w.sum() ** 2 / np.sum(w**2))
    return log_z, se, ess
