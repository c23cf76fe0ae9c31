"""The robot-arm MLP with its gamma precisions integrated out, for importance sampling.

``robot_arm_mlp(h)`` puts a precision α ~ Gamma(a, r) on each weight group (w | α ~ N(0, I/α))
and β ~ Gamma(a_β, r_β) on the noise. Integrating them out analytically leaves the same
evidence over the weights alone: each group of n weights has a multivariate t prior,

    p(w) = Γ(a + n/2) / (Γ(a) (2πr)^{n/2}) · (1 + ‖w‖² / 2r)^{−(a + n/2)},

and the N outputs a multivariate t likelihood in the residual sum of squares S,

    p(D | w) = Γ(a_β + N/2) r_β^{a_β} / (Γ(a_β) (2π)^{N/2})
               · (r_β + S/2)^{−(a_β + N/2)}.

Without the precisions, the posterior has no ridge between a scale and its weights, and a
t mixture fitted to weight draws is close to it (importance-sampling ESS of 20,000–200,000 of
400,000 at h = 1 and 2, against 220 of 100,000 at h = 1 in the non-centred parameters).
Flat layout: w_in (inputs × h, row-major), b_hidden (h), w_out (h × outputs, row-major), b_out.
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy.special import gammaln

from pymc_evidence.testing import _gamma_precision, robot_arm_data

#: Barber & Bishop's (s, ω) per weight group (``robot_arm_mlp``), ω = h for w_out.
GROUPS = (("w_in", 0.2, 1.0), ("b_hidden", 0.2, 1.0), ("w_out", 0.2, None), ("b_out", 1.0, 0.2))
NOISE = (0.2, 400.0)
#: Points per likelihood evaluation (memory: points × data × h).
CHUNK = 5000


class CollapsedRobotArm:
    """Log prior, log likelihood and prior draws of the collapsed model with ``h`` units."""

    def __init__(self, h: int, x=None, y=None):
        if x is None:
            x, y = robot_arm_data()[:2]
        self.x, self.y, self.h = np.asarray(x, float), np.asarray(y, float), int(h)
        n_in, n_out = self.x.shape[1], self.y.shape[1]
        sizes = {"w_in": n_in * h, "b_hidden": h, "w_out": h * n_out, "b_out": n_out}
        self.groups, start = [], 0
        for name, s, omega in GROUPS:
            a, r = _gamma_precision(s, float(h) if omega is None else omega)
            self.groups.append((name, slice(start, start + sizes[name]), a, r))
            start += sizes[name]
        self.dim = start

    def weights(self, theta: np.ndarray) -> dict:
        """The flat points as each group's weight arrays (leading axis: points)."""
        n_in, n_out = self.x.shape[1], self.y.shape[1]
        shapes = {"w_in": (n_in, self.h), "w_out": (self.h, n_out)}
        return {name: theta[:, sl].reshape((len(theta),) + shapes.get(name, (-1,)))
                for name, sl, _, _ in self.groups}

    def flat(self, weights: dict) -> np.ndarray:
        """Points from weight arrays (e.g. a fit's posterior draws of w_in, …, flattened
        over chains and draws)."""
        return np.concatenate([np.reshape(weights[name], (len(weights[name]), -1))
                               for name, *_ in self.groups], axis=1)

    def log_densities(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        log_prior = 0.0
        for _, sl, a, r in self.groups:
            n = sl.stop - sl.start
            squares = np.sum(theta[:, sl] ** 2, axis=1)
            log_prior = log_prior + (gammaln(a + n / 2) - gammaln(a)
                                     - n / 2 * np.log(2 * np.pi * r)
                                     - (a + n / 2) * np.log1p(squares / (2 * r)))
        a, r = _gamma_precision(*NOISE)
        N = self.y.size
        log_likelihood = np.empty(len(theta))
        for i in range(0, len(theta), CHUNK):
            w = self.weights(theta[i:i + CHUNK])
            hidden = np.tanh(np.einsum("ni,kih->knh", self.x, w["w_in"])
                             + w["b_hidden"][:, None, :])
            f = np.einsum("knh,kho->kno", hidden, w["w_out"]) + w["b_out"][:, None, :]
            squares = np.sum((self.y[None] - f) ** 2, axis=(1, 2))
            log_likelihood[i:i + CHUNK] = (gammaln(a + N / 2) - gammaln(a) + a * np.log(r)
                                           - N / 2 * np.log(2 * np.pi)
                                           - (a + N / 2) * np.log(r + squares / 2))
        return log_prior, log_likelihood

    def log_joint_and_gradient(self, point: np.ndarray) -> tuple[float, np.ndarray]:
        """log p(w) + log p(D | w) at one flat point, and its gradient (for optimisers).

        With f = tanh(x W + b) V + c and S the residual sum of squares, the likelihood's
        gradient is −(a_β + N/2) / (r_β + S/2) · ½ ∂S/∂w; a t prior's is
        −(a + n/2) (w / r) / (1 + ‖w‖² / 2r)."""
        log_prior, log_likelihood = self.log_densities(point[None])
        gradient = np.empty(self.dim)
        for _, sl, a, r in self.groups:
            w = point[sl]
            gradient[sl] = -(a + w.size / 2) * (w / r) / (1 + w @ w / (2 * r))
        w = {name: value[0] for name, value in self.weights(point[None]).items()}
        hidden = np.tanh(self.x @ w["w_in"] + w["b_hidden"])
        residuals = self.y - (hidden @ w["w_out"] + w["b_out"])
        a, r = _gamma_precision(*NOISE)
        # −½ ∂S/∂f is the residuals, carried back through the layer by the chain rule
        scale = (a + self.y.size / 2) / (r + np.sum(residuals**2) / 2)
        back = (residuals @ w["w_out"].T) * (1 - hidden**2)
        likelihood_gradient = np.concatenate([(self.x.T @ back).ravel(), back.sum(0),
                                              (hidden.T @ residuals).ravel(),
                                              residuals.sum(0)])
        return float(log_prior[0] + log_likelihood[0]), gradient + scale * likelihood_gradient

    def prior_draws(self, rng, n: int) -> np.ndarray:
        """t draws: normal over the square root of a χ²_{2a} / 2a, scaled by √(r/a)."""
        out = np.empty((n, self.dim))
        for _, sl, a, r in self.groups:
            chi = np.sqrt(rng.chisquare(2 * a, n) / (2 * a))
            normal = rng.standard_normal((n, sl.stop - sl.start))
            out[:, sl] = normal * np.sqrt(r / a) / chi[:, None]
        return out

    def symmetry_group(self) -> list:
        """Every signed permutation of the units as ``(index, signs)``: the copy of x is
        ``signs * x[index]`` (unit k of the copy is unit perm[k] of x, times signs[k])."""
        n_in, n_out, h = self.x.shape[1], self.y.shape[1], self.h
        where = {name: sl.start for name, sl, _, _ in self.groups}
        group = []
        for perm in itertools.permutations(range(h)):
            for signs in itertools.product((1.0, -1.0), repeat=h):
                index, sign = np.arange(self.dim), np.ones(self.dim)
                for k in range(h):
                    slots = ([(where["w_in"] + i * h, k, perm[k]) for i in range(n_in)]
                             + [(where["b_hidden"], k, perm[k])]
                             + [(where["w_out"] + o, k * n_out, perm[k] * n_out)
                                for o in range(n_out)])
                    for base, to, source in slots:
                        index[base + to] = base + source
                        sign[base + to] = signs[k]
                group.append((index, sign))
        return group

    def align(self, draws: np.ndarray) -> np.ndarray:
        """Each draw's copy nearest the draw of highest log posterior."""
        log_prior, log_likelihood = self.log_densities(draws)
        reference = draws[np.argmax(log_prior + log_likelihood)]
        copies = np.stack([sign * draws[:, index] for index, sign in self.symmetry_group()])
        nearest = np.argmin(np.sum((copies - reference) ** 2, axis=2), axis=0)
        return copies[nearest, np.arange(len(draws))]
