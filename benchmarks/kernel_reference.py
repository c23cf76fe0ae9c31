"""Would a kernel-mixture reference shorten the tempering from the mode on the robot-arm MLP?

An experiment, not a setting of the package. The reference that `thermodynamic` tempers from
at a found mode is half the prior and half a Gaussian fitted to a population relaxed at the
mode; on the robot arm with three hidden units that Gaussian's draws lie tens of thousands of
nats of log-likelihood below the population (``reference_fit.md``), so the ladder from it is
as long as the one from the prior. Here the Gaussian is swapped for a kernel mixture on the
relaxed points (one Gaussian kernel per point, covariance ``bandwidth``² times the
population's) and the prior's weight for ``--prior-weight``; everything else is the package's
own (the fold over the symmetry copies, the domain's probability, the levels of doubled
relaxation sweeps).

It goes on from a checkpoint of a default fit (``mlp_calibration.py --checkpoints DIR``) whose
tempering from the mode has relaxed its population: a copy of it, with the tempering reset to
that relaxed population, is resumed by ``thermodynamic(robot_arm_mlp(h), random_seed=seed,
progressbar=False, cores=1)``, so the first round, the mode search and the first relaxation are
the default fit's. Rerun with the same arguments to go on; ``--report`` writes the results
from the checkpoint alone.

Written: ``benchmarks/results/kernel_reference.md`` (the stages of the two references' first
levels side by side: λ, the mean of log(p L / q), the "likelihood" the tempering from q sees,
and about how many gradient evaluations per particle each took, which time on a shared core
does not measure fairly; and the levels' estimates).

Usage::

    python benchmarks/kernel_reference.py DIR/robot_arm_h=3_defaults_2.ckpt OUT.ckpt \\
        --hidden-units 3 --seed 2 --bandwidth 0.1 --prior-weight 0.05
"""

from __future__ import annotations

import argparse
import datetime
import json
import pickle
import platform
import warnings
from pathlib import Path

import numpy as np
import pymc
from scipy.special import logsumexp

import pymc_evidence as pm_evidence
from pymc_evidence.estimators import _reference
from pymc_evidence.testing import robot_arm_mlp

from evidence_calibration import _notes  # this directory: first on sys.path

RESULTS = Path(__file__).parent / "results" / "kernel_reference.md"
#: The package's own reference, kept before :func:`use_kernel_mixture` swaps it.
PACKAGE_PRIOR_WEIGHT, PACKAGE_LOG_GAUSSIAN = (_reference.PRIOR_WEIGHT,
                                              _reference.DomainReference._log_gaussian)


def log_kernel_mixture(kernels: _reference.GaussianAtMode, chol_inv: np.ndarray,
                       X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log density of the kernel mixture (centres in ``kernels.mean``) at the rows of X, and
    its gradient."""
    # in whitened coordinates each kernel is a unit Gaussian at its whitened centre
    centres = kernels.mean @ chol_inv.T
    Y = X @ chol_inv.T
    log_kernels = -0.5 * ((Y**2).sum(1)[:, None] - 2 * Y @ centres.T
                          + (centres**2).sum(1)[None])
    log_sum = logsumexp(log_kernels, axis=1)
    responsibilities = np.exp(log_kernels - log_sum[:, None])
    return log_sum - kernels.log_norm, -(Y - responsibilities @ centres) @ chol_inv


def use_kernel_mixture(bandwidth: float, prior_weight: float) -> None:
    """Make the tempering from the mode use a kernel mixture on the relaxed points.

    The points are stored in ``GaussianAtMode.mean`` (one row per kernel) and the kernels'
    common Cholesky factor in ``chol``; ``log_norm`` gains log(number of kernels).
    """

    def fit(cls, density, layers, mode, population, rng):
        copies = _reference._copies(density, list(layers))[2]
        chol = np.linalg.cholesky(np.atleast_2d(np.cov(population, rowvar=False))
                                  * bandwidth**2)
        log_norm = (np.sum(np.log(np.diag(chol))) + 0.5 * density.dim * np.log(2 * np.pi)
                    + np.log(copies) + np.log(len(population)))
        unnormalised = cls(density, layers, mode, _reference.GaussianAtMode(
            np.array(population), chol, log_norm, np.nan))
        inside = unnormalised._in_domain(
            unnormalised._gaussian_draws(rng, _reference.DOMAIN_DRAWS)).mean()
        if inside == 0:
            raise ValueError("the kernel mixture has no mass in the mode's domain")
        return cls(density, layers, mode, unnormalised.gaussian._replace(
            log_norm=log_norm + np.log(inside),
            log_domain_se=float(np.sqrt((1 - inside) / (inside * _reference.DOMAIN_DRAWS)))))

    def draws(self, rng, n):
        centres = self.gaussian.mean
        return (centres[rng.integers(0, len(centres), n)]
                + rng.standard_normal((n, self.dim)) @ self.gaussian.chol.T)

    _reference.PRIOR_WEIGHT = prior_weight
    _reference.ModeReference.fit = classmethod(fit)
    _reference.ModeReference._gaussian_draws = draws
    # the tempering keeps its particles in the mode's domain, where the fold is the identity
    _reference.DomainReference._log_gaussian = (
        lambda self, X: log_kernel_mixture(self.gaussian, self._chol_inv, X))


def reset_to_relaxed(source: Path, target: Path) -> None:
    """Copy ``source``'s checkpoint to ``target`` with its tempering from the mode reset to
    its relaxed population (no reference, no round, no levels); the sampling seconds so far
    go to a file beside it."""
    saved = pickle.loads(source.read_bytes())
    progress = saved["state"]["from_mode"]["progress"]
    if progress.relaxed is None:
        raise SystemExit(f"{source} holds no relaxed population")
    saved["state"]["from_mode"]["progress"] = _reference.FromModeProgress(
        progress.relaxed, progress.step_size, progress.sweeps_done, None, None, ())
    target.write_bytes(pickle.dumps(saved))
    _reset_seconds(target).write_text(json.dumps({"seconds": saved["sampling_seconds"]}))


def _reset_seconds(checkpoint: Path) -> Path:
    """The file beside ``checkpoint`` holding the sampling seconds at the reset."""
    return checkpoint.with_name(checkpoint.name + ".reset.json")


def stage_table(progress) -> tuple[list, int]:
    """Rows (λ, mean log(p L / q) over the groups, gradient evaluations per particle) of the
    current level's stages so far, and the total evaluations."""
    stages = progress.round.stages if progress.round is not None else []
    rows = [(s.lam, float(np.mean(s.mean_ll)), s.move.n_transitions * s.move.n_leapfrog)
            for s in stages]
    return rows, sum(row[2] for row in rows)


def log_ratio_at_relaxed(source_progress, kernel_progress, mode, hidden_units: int,
                         kernel_prior_weight: float) -> list[float]:
    """Mean log(p L / q) of each reference (Gaussian, kernels) at the relaxed population: log Z
    plus KL(relaxed ‖ q) − KL(relaxed ‖ posterior), so its excess over log Z is a lower bound
    on KL(relaxed ‖ q), how badly q misses the relaxed points (a deficit: q piles more mass on
    them than the posterior does)."""
    density = pm_evidence.get_density(robot_arm_mlp(hidden_units))
    relaxed = kernel_progress.relaxed.position
    log_prior, log_likelihood = density.log_densities(relaxed)
    gaussian = _reference.DomainReference(density, [], mode, source_progress.gaussian)
    kernels = _reference.DomainReference(density, [], mode, kernel_progress.gaussian)
    components = [
        (PACKAGE_PRIOR_WEIGHT, PACKAGE_LOG_GAUSSIAN(gaussian, relaxed)[0]),
        (kernel_prior_weight,
         log_kernel_mixture(kernel_progress.gaussian, kernels._chol_inv, relaxed)[0]),
    ]
    return [float(np.mean(log_prior + log_likelihood
                          - np.logaddexp(np.log(weight) + log_prior, np.log1p(-weight) + log_q)))
            for weight, log_q in components]


def report(source: Path, checkpoint: Path, argv: str, hidden_units: int,
           prior_weight: float) -> str:
    gaussian = pickle.loads(source.read_bytes())
    kernel = pickle.loads(checkpoint.read_bytes())
    reset = json.loads(_reset_seconds(checkpoint).read_text())["seconds"]
    g_progress = gaussian["state"]["from_mode"]["progress"]
    k_progress = kernel["state"]["from_mode"]["progress"]
    g_rows, g_total = stage_table(g_progress)
    k_rows, k_total = stage_table(k_progress)
    mode = np.asarray(kernel["state"]["from_mode"]["mode"])
    at_relaxed = log_ratio_at_relaxed(g_progress, k_progress, mode, hidden_units, prior_weight)
    levels = "; ".join(f"{sweeps} sweeps: {e.log_evidence:.2f} ± {e.se:.2f}"
                       for sweeps, e in k_progress.levels) or "none finished yet"
    lines = [
        "# A kernel-mixture reference for the tempering from the mode",
        "",
        f"Written by `python benchmarks/kernel_reference.py {argv}` on "
        f"{datetime.date.today()} (Python {platform.python_version()}, PyMC "
        f"{pymc.__version__}). Both columns go on from the same default fit's first round, "
        "mode search and relaxed population; 'Gaussian': that fit's own tempering from its "
        "reference (half prior, half the Gaussian), 'kernels': the kernel mixture's. "
        "Gradient evaluations: per particle, about HMC transitions × leapfrog steps (those "
        "of the stage's last transition; each transition draws its own around trajectory "
        "length / step size). "
        f"Sampling since the reset: {kernel['sampling_seconds'] - reset:.0f} s "
        "(one core shared with other jobs).",
        "",
        f"Levels of the kernel mixture finished (relaxation sweeps: estimate): {levels}.",
        "",
        "Mean log(p L / q) at the relaxed population, log Z plus KL(relaxed ‖ q) − "
        "KL(relaxed ‖ posterior): Gaussian " f"{at_relaxed[0]:.1f}, kernels {at_relaxed[1]:.1f}.",
        "",
        "| stage | Gaussian: λ | mean log(p L / q) | gradient evaluations | kernels: λ "
        "| mean log(p L / q) | gradient evaluations |",
        "|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for k in range(max(len(g_rows), len(k_rows))):
        g = g_rows[k] if k < len(g_rows) else None
        q = k_rows[k] if k < len(k_rows) else None
        lines.append(f"| {k + 1} | " + " | ".join(
            f"{row[0]:.2e} | {row[1]:,.1f} | {row[2]:,}" if row else " |  | "
            for row in (g, q)) + " |")
    lines += [f"| total | | | {g_total:,} | | | {k_total:,} |", ""]
    notes = _notes(RESULTS) or "\nHand-written; kept when the script rewrites the table.\n"
    return "\n".join(lines) + "\n## Notes\n" + notes


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="checkpoint of a default fit")
    parser.add_argument("checkpoint", type=Path, help="this experiment's checkpoint")
    parser.add_argument("--hidden-units", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True, help="the default fit's seed")
    parser.add_argument("--bandwidth", type=float, default=0.1)
    parser.add_argument("--prior-weight", type=float, default=0.05)
    parser.add_argument("--report", action="store_true", help="only write the results")
    args = parser.parse_args(argv)
    if not args.report:
        if not args.checkpoint.exists():
            reset_to_relaxed(args.source, args.checkpoint)
        use_kernel_mixture(args.bandwidth, args.prior_weight)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = pm_evidence.thermodynamic(
                robot_arm_mlp(args.hidden_units), random_seed=args.seed, progressbar=False,
                cores=1, checkpoint=args.checkpoint)
        print(f"log Z = {result.log_evidence:.3f} ± {result.se:.3f}")
    shown = (f"{args.source.name} {args.checkpoint.name} --hidden-units {args.hidden_units} "
             f"--seed {args.seed} --bandwidth {args.bandwidth} --prior-weight {args.prior_weight}")
    text = report(args.source, args.checkpoint, shown, args.hidden_units, args.prior_weight)
    RESULTS.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
