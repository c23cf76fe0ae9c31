"""MacKay's evidence framework: re-estimated weight-decay and noise precisions (Barber & Bishop
1997, eq. 10–11; MacKay 1992, eq. 1, 8–9), on a PyMC model that supplies the architecture.

The model is written with zero-mean Gaussian priors of *fixed* precision on groups of weights,
``w_k ~ N(0, 1/α⁰_k)``, and (optionally) a Gaussian likelihood of fixed noise precision β⁰. The
framework treats ``α_k`` and ``β`` as hyperparameters: it alternates finding the mode
``ŵ`` of ``M(w) = β E_D(w) + Σ_k α_k E_{W_k}(w)`` and re-estimating

    α_k := γ_k / (ŵ_kᵀ ŵ_k),      1/β := Σ (y − f(x; ŵ))² / (N − γ),      (eq. 10)
    γ_k = W_k − α_k Tr_k(A⁻¹),    A = ∇∇M(ŵ),

then approximates the evidence of the hierarchical model by eq. 11. Everything is computed from
the model's compiled density: with the prior known to be Gaussian (checked numerically),
``E_D`` and its gradient and Hessian follow from the log likelihood at ``β⁰`` by rescaling.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from pytensor.graph.traversal import ancestors
from pytensor.tensor.random.basic import NormalRV

from pymc_evidence._constants import LOG_2PI
from pymc_evidence._optimize import Optimum, climb, maximize, newton_polish

#: a group whose γ_k falls below this × W_k is being switched off by the data (α_k → ∞).
GAMMA_PRUNED = 1e-6
#: ... or whose α_k grows beyond this × the model's α⁰_k.
ALPHA_PRUNED = 1e8


@dataclass
class GaussianGroups:
    """Weight groups with zero-mean isotropic Gaussian priors of fixed precision."""

    names: list[str]
    index: list[np.ndarray]  # flat indices of each group
    alpha0: np.ndarray  # the model's precision per group

    @property
    def sizes(self) -> np.ndarray:
        return np.array([len(i) for i in self.index])

    def per_coordinate(self, alpha: np.ndarray, dim: int) -> np.ndarray:
        out = np.empty(dim)
        for idx, a in zip(self.index, alpha):
            out[idx] = a
        return out

    def log_prior(self, x: np.ndarray, alpha: np.ndarray) -> tuple[float, np.ndarray]:
        """``Σ_k W_k/2 log(α_k/2π) − α_k/2 ‖w_k‖²`` and its gradient."""
        value, grad = 0.0, np.empty_like(x)
        for idx, a in zip(self.index, alpha):
            value += 0.5 * len(idx) * (np.log(a) - LOG_2PI) - 0.5 * a * float(x[idx] @ x[idx])
            grad[idx] = -a * x[idx]
        return value, grad


@dataclass
class GaussianNoise:
    """A Gaussian likelihood ``y ~ N(f(w), 1/β⁰)`` that is the model's whole likelihood."""

    name: str
    beta0: float
    n_obs: int  # number of scalar observations (N × outputs)

    def error(self, log_lik: float) -> float:
        """``E_D = ½ Σ (y − f)²`` recovered from the log likelihood at ``β⁰``."""
        return (0.5 * self.n_obs * (np.log(self.beta0) - LOG_2PI) - log_lik) / self.beta0


@dataclass
class MacKayFit:
    """One mode of the evidence framework, at its re-estimated hyperparameters."""

    opt: Optimum  # the mode ŵ and M's value there (value = log joint at α̂, β̂)
    alpha: np.ndarray
    beta: float | None
    gamma_k: np.ndarray
    log_prior: float
    log_likelihood: float
    neg_hessian: np.ndarray  # A
    iterations: int
    hyper_converged: bool
    valid: bool  # False when a group was pruned (γ_k → 0): eq. 11 does not apply
    notes: list[str] = field(default_factory=list)


def gaussian_groups(density, groups, rng: np.random.Generator) -> GaussianGroups:
    """Resolve ``groups`` (None, a list of variable names, or ``{group: [names]}``) and check
    numerically that the model's prior is ``Π_k N(w_k | 0, 1/α⁰_k I)``."""
    model = density.model
    free = list(density.free_names)
    if groups is None:
        groups = {name: [name] for name in free}
    elif isinstance(groups, (list, tuple)):
        groups = {name: [name] for name in groups}
    elif isinstance(groups, dict):
        groups = {str(k): [v] if isinstance(v, str) else list(v) for k, v in groups.items()}
    else:
        raise TypeError(
            "groups must be None, a list of variable names or a dict {group: [variable names]}"
        )
    seen = [name for names in groups.values() for name in names]
    unknown = [name for name in seen if name not in free]
    if unknown:
        raise ValueError(f"groups name variables {unknown} that are not free variables of the "
                         f"model; free variables: {free}")
    duplicated = sorted({name for name in seen if seen.count(name) > 1})
    if duplicated:
        raise ValueError(f"variables {duplicated} appear in more than one group")
    missing = [name for name in free if name not in seen]
    if missing:
        raise ValueError(
            f"framework='mackay' needs every free variable in a Gaussian weight group; "
            f"{missing} are in none. Fix non-Gaussian parameters (e.g. the noise level) as "
            "constants in the model, or use framework='fixed'."
        )
    offsets = np.cumsum([0] + density.sizes)
    position = {name: i for i, name in enumerate(density.names)}
    index = []
    for group, names in groups.items():
        idx = []
        for name in names:
            if name not in position:
                transform = model.rvs_to_transforms.get(model[name])
                raise ValueError(
                    f"variable {name!r} has a transform ({type(transform).__name__}); "
                    "framework='mackay' needs zero-mean Gaussian (untransformed) weights"
                )
            i = position[name]
            idx.extend(range(offsets[i], offsets[i + 1]))
        index.append(np.array(idx, dtype=int))

    # α⁰ from the prior's gradient (−α⁰ w), then the log prior must match the closed form.
    X = density.prior_draws(rng, 3)
    values = density(X)
    alpha0 = []
    for group, idx in zip(groups, index):
        ratio = -values.grad_log_prior[:, idx] / X[:, idx]
        a = float(np.median(ratio))
        if not (a > 0 and np.allclose(ratio, a, rtol=1e-6, atol=0)):
            raise ValueError(
                f"group {group!r}: the prior is not a zero-mean Gaussian of one fixed precision "
                "(its gradient is not −α·w with the same α for every weight, at every prior "
                "draw). framework='mackay' needs w ~ Normal(0, sigma) with a constant sigma "
                "shared by the group."
            )
        alpha0.append(a)
    result = GaussianGroups(list(groups), index, np.array(alpha0))
    expected = [result.log_prior(x, result.alpha0)[0] for x in X]
    if not np.allclose(values.log_prior, expected, rtol=1e-8, atol=1e-8):
        raise ValueError(
            "the model's log prior is not the sum of zero-mean isotropic Gaussians over the "
            "groups (it has other terms, or non-zero means); framework='mackay' cannot be used"
        )
    return result


def gaussian_noise(density, noise) -> GaussianNoise | None:
    """Check that ``noise`` names an observed ``pm.Normal`` with constant sigma that is the
    model's whole likelihood, and read its precision β⁰."""
    if noise is None:
        return None
    model = density.model
    if not isinstance(noise, str):
        raise TypeError(f"noise must be the name of an observed variable, got {noise!r}")
    observed = {rv.name: rv for rv in model.observed_RVs}
    if noise not in observed:
        raise ValueError(f"noise={noise!r} is not an observed variable; observed: "
                         f"{sorted(observed)}")
    if len(observed) > 1 or model.potentials:
        raise ValueError(
            f"noise={noise!r}: re-estimating the noise precision needs {noise!r} to be the whole "
            "likelihood, but the model has other observed variables or Potentials"
        )
    rv = observed[noise]
    if not isinstance(rv.owner.op, NormalRV):
        raise ValueError(
            f"noise={noise!r} must be a pm.Normal observation (Gaussian noise), got "
            f"{type(rv.owner.op).__name__}"
        )
    sigma = rv.owner.op.dist_params(rv.owner)[1]
    if set(ancestors([sigma])) & set(model.free_RVs + model.value_vars):
        raise ValueError(
            f"noise={noise!r}: its sigma depends on free variables; framework='mackay' "
            "re-estimates the noise precision itself, so write sigma as a constant"
        )
    sigma_value = np.asarray(sigma.eval(), dtype=float)
    data = model.rvs_to_values[rv]
    data = data.get_value() if hasattr(data, "get_value") else data.data
    n_obs = int(np.size(data))
    if not np.allclose(sigma_value, sigma_value.ravel()[0]):
        raise ValueError(f"noise={noise!r}: sigma must be one constant for all observations")
    return GaussianNoise(noise, float(sigma_value.ravel()[0]) ** -2, n_obs)


class _Penalised(NamedTuple):
    """The log joint ``−M(w)`` at given hyperparameters α (per group) and β (noise): its
    value with gradient, and its negative Hessian, for the optimisers."""

    density: object
    groups: GaussianGroups
    noise: GaussianNoise | None

    def parts(self, x, alpha, beta):
        """log prior, log likelihood and their gradients at ``x``."""
        values = self.density(x[None, :])
        ll, gl = float(values.log_likelihood[0]), np.asarray(values.grad_log_likelihood[0], float)
        lp, gp = self.groups.log_prior(x, alpha)
        if self.noise is not None and np.isfinite(ll):
            e_d = self.noise.error(ll)
            ll = 0.5 * self.noise.n_obs * (np.log(beta) - LOG_2PI) - beta * e_d
            gl = gl * (beta / self.noise.beta0)
        return lp, ll, gp, gl

    def objective(self, alpha, beta):
        def objective(x):
            lp, ll, gp, gl = self.parts(x, alpha, beta)
            return lp + ll, gp + gl

        return objective

    def hessian(self, alpha, beta):
        """∇∇ log p(w, D | α, β) as a function of w."""
        d = self.density.dim
        scale = 1.0 if self.noise is None else beta / self.noise.beta0
        alpha_coord = self.groups.per_coordinate(alpha, d)
        alpha0_coord = self.groups.per_coordinate(self.groups.alpha0, d)

        def hessian(x):
            h_data = -(self.density.hessian(x) + np.diag(alpha0_coord))  # −∇∇ log lik at β⁰
            return -(scale * h_data + np.diag(alpha_coord))

        return hessian


def fit_mode(
    density,
    groups: GaussianGroups,
    noise: GaussianNoise | None,
    x0: np.ndarray,
    *,
    start: int,
    max_iter: int = 200,
    tol: float = 1e-8,
) -> MacKayFit:
    """From ``x0``, alternate the mode of ``M(w)`` and the updates (10) to a fixed point."""
    penalised = _Penalised(density, groups, noise)
    alpha = groups.alpha0.copy()
    beta = noise.beta0 if noise is not None else None
    notes: list[str] = []
    x = np.asarray(x0, float)
    converged, valid = False, True
    iterations = 0
    for iterations in range(1, max_iter + 1):
        objective = penalised.objective(alpha, beta)
        hessian = penalised.hessian(alpha, beta)
        if iterations == 1:  # from a prior draw: L-BFGS-B, then Newton
            opt = maximize(objective, x, start=start)
            opt, hess = newton_polish(objective, hessian, opt)
        else:  # from the previous mode: Newton steps usually suffice
            opt, hess = climb(objective, hessian, x, start=start)
        x = opt.x
        alpha_new, beta_new, note = _reestimate(density, groups, noise, x, -hess, alpha, beta)
        if note:
            notes.append(note)
            valid = False
            break
        change = np.max(np.abs(np.log(alpha_new) - np.log(alpha)))
        if noise is not None:
            change = max(change, abs(np.log(beta_new) - np.log(beta)))
        alpha, beta = alpha_new, beta_new
        if change < tol:
            converged = True
            break

    # the mode, Hessian and γ at the final hyperparameters
    opt, hess = climb(penalised.objective(alpha, beta), penalised.hessian(alpha, beta), x,
                      start=start)
    A = -hess
    gamma_k = np.full(len(groups.index), np.nan)
    if np.linalg.eigvalsh(A)[0] > 0:
        diag_inv = np.diag(np.linalg.inv(A))
        gamma_k = np.array([len(idx) - a * diag_inv[idx].sum()
                            for idx, a in zip(groups.index, alpha)])
    lp, ll, _, _ = penalised.parts(opt.x, alpha, beta)
    if not converged and not notes:
        notes.append(f"the hyperparameter re-estimation (eq. 10) did not converge in "
                     f"{max_iter} iterations")
    return MacKayFit(opt, alpha, beta, gamma_k, lp, ll, A, iterations, converged, valid, notes)


def _reestimate(density, groups, noise, x, A, alpha, beta):
    """Eq. 10 at the mode ``x`` with Hessian ``A`` of M: α_k = γ_k / Σ w_k², β = (N − γ) /
    (2 E_D). Returns ``(α, β, None)``, or ``(None, None, note)`` saying why they cannot be
    re-estimated."""
    try:
        a_inv = np.linalg.inv(np.linalg.cholesky(A))
    except np.linalg.LinAlgError:
        return None, None, ("the Hessian A is not positive definite at the mode of M(w), so the "
                            "hyperparameters could not be re-estimated (eq. 10)")
    diag_inv = np.sum(a_inv**2, axis=0)  # diag(A⁻¹) from the inverse Cholesky factor
    gamma_k = np.array([len(idx) - a * diag_inv[idx].sum()
                        for idx, a in zip(groups.index, alpha)])
    sq = np.array([float(x[idx] @ x[idx]) for idx in groups.index])
    alpha_new = gamma_k / sq
    pruned = [name for name, g, w, a, a0 in
              zip(groups.names, gamma_k, groups.sizes, alpha_new, groups.alpha0)
              if not (g > GAMMA_PRUNED * w and a < ALPHA_PRUNED * a0)]
    if pruned:
        return None, None, (
            f"group(s) {pruned}: γ_k -> 0 and α_k -> ∞ (the data switch these weights off); "
            "the evidence framework has no finite optimum of the hyperparameters here and "
            "eq. 11 does not apply. Remove the group from the model and compare that model."
        )
    beta_new = beta
    if noise is not None:
        e_d = noise.error(float(density(x[None, :]).log_likelihood[0]))
        beta_new = (noise.n_obs - gamma_k.sum()) / (2 * e_d)
    return alpha_new, beta_new, None


def occam_hyper_terms(fit: MacKayFit, noise: GaussianNoise | None) -> float:
    """``½ Σ_k ln(2/γ_k) + ½ ln(2/(N − γ))`` of eq. 11: the widths of the hyperparameters'
    posteriors in log space (the second term only when β is re-estimated)."""
    gamma_k = fit.gamma_k
    if not fit.valid:
        return np.nan
    total = 0.5 * float(np.sum(np.log(2.0 / gamma_k)))
    if noise is not None:
        total += 0.5 * float(np.log(2.0 / (noise.n_obs - gamma_k.sum())))
    return total
