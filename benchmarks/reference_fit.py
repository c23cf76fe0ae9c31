"""How close is the tempering-from-the-mode reference to the posterior on the robot-arm MLP?

Reads a ``thermodynamic`` checkpoint of ``robot_arm_mlp(h)`` whose tempering from the found
mode has fitted its reference (a default fit saves one with ``checkpoint=``; e.g.
``mlp_calibration.py --checkpoints DIR``) and compares log-likelihoods: the population relaxed
at the mode, draws of the reference's Gaussian (at its width and half of it), points a quarter
of the way from relaxed points to the mode, and draws of other candidate shapes fitted to
the same population (the Gaussian in centred weights w = z · exp(−c·u) of each scale pair, a
kernel mixture on the relaxed points, and a mixture of Gaussians with local covariances, one
per k-means cluster of the relaxed points). A reference whose draws lie far below the relaxed
population makes the ladder from it as long as the one from the prior. Also lists the stages
of the tempering from the reference saved so far.

Written: ``benchmarks/results/reference_fit.md``.

Usage::

    python benchmarks/reference_fit.py DIR/robot_arm_h=3_defaults_2.ckpt --hidden-units 3
"""

from __future__ import annotations

import argparse
import datetime
import pickle
import platform
import warnings
from pathlib import Path

import numpy as np
import pymc
from scipy.cluster.vq import kmeans2

import pymc_evidence as pm_evidence
from pymc_evidence.scale_moves import find_scale_pairs
from pymc_evidence.testing import robot_arm_mlp

RESULTS = Path(__file__).parent / "results" / "reference_fit.md"
PERCENTILES = (1, 10, 50, 90, 99)


def centred(X: np.ndarray, pairs, sign: float = -1.0) -> np.ndarray:
    """Each pair's block z as w = z · exp(−c·u) (``sign=+1``: back from w to z)."""
    Y = X.copy()
    for pair in pairs:
        Y[:, pair.start:pair.stop] *= np.exp(sign * pair.power * X[:, [pair.scale]])
    return Y


def cluster_mixture_draws(rng, relaxed: np.ndarray, clusters: int, draws: int) -> np.ndarray:
    """Draws of a Gaussian mixture with a component per k-means cluster of the relaxed points
    (whitened by their covariance), weighted by its share of the points, each with its
    cluster's covariance plus 0.001 of the population's (a cluster may have fewer points
    than dimensions)."""
    covariance = np.cov(relaxed, rowvar=False)
    whitened = np.linalg.solve(np.linalg.cholesky(covariance), (relaxed - relaxed.mean(0)).T).T
    _, labels = kmeans2(whitened, clusters, seed=rng, minit="++")
    picks = labels[rng.integers(0, len(relaxed), draws)]
    out = np.empty((draws, relaxed.shape[1]))
    for k in np.unique(picks):
        members = relaxed[labels == k]
        local = (np.cov(members, rowvar=False) if len(members) > 1 else 0.0) + 1e-3 * covariance
        chosen = picks == k
        out[chosen] = (members.mean(0) + rng.standard_normal((chosen.sum(), relaxed.shape[1]))
                       @ np.linalg.cholesky(local).T)
    return out


def candidates(rng, density, mode, relaxed, gaussian, draws: int) -> dict:
    """Name → points whose log-likelihoods the table compares."""
    normal = rng.standard_normal((draws, density.dim))
    pairs = find_scale_pairs(density)
    w = centred(relaxed, pairs)
    spread = np.linalg.cholesky(np.cov(relaxed, rowvar=False))
    kernel_centres = relaxed[rng.integers(0, len(relaxed), draws)]
    return {
        "relaxed population": relaxed,
        "reference's Gaussian": gaussian.mean + normal @ gaussian.chol.T,
        "the same at half its width": gaussian.mean + 0.5 * normal @ gaussian.chol.T,
        "a quarter of the way from a relaxed point to the mode": mode + 0.75 * (relaxed - mode),
        "Gaussian in centred weights (×1.5 covariance)": centred(
            w.mean(axis=0) + normal @ np.linalg.cholesky(1.5 * np.cov(w, rowvar=False)).T,
            pairs, +1.0),
        "kernel mixture on the relaxed points, bandwidth 0.05": kernel_centres
        + 0.05 * normal @ spread.T,
        "kernel mixture on the relaxed points, bandwidth 0.1": kernel_centres
        + 0.1 * normal @ spread.T,
        "Gaussian mixture, 16 k-means clusters' covariances": cluster_mixture_draws(
            rng, relaxed, 16, draws),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--hidden-units", type=int, required=True)
    parser.add_argument("--draws", type=int, default=4000)
    args = parser.parse_args(argv)
    saved = pickle.loads(args.checkpoint.read_bytes())
    from_mode = saved["state"].get("from_mode")
    if not from_mode or from_mode["progress"].gaussian is None:
        parser.error(f"{args.checkpoint} holds no fitted reference of a tempering from the mode")
    progress, mode = from_mode["progress"], np.asarray(from_mode["mode"])
    density = pm_evidence.get_density(robot_arm_mlp(args.hidden_units))
    rng = np.random.default_rng(0)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        rows = []
        for name, X in candidates(rng, density, mode, progress.relaxed.position,
                                  progress.gaussian, args.draws).items():
            log_likelihood = density.log_densities(X)[1]
            cells = " | ".join(f"{q:,.0f}" for q in np.percentile(log_likelihood, PERCENTILES))
            rows.append(f"| {name} | {len(X)} | {cells} |")
        mode_log_likelihood = float(density.log_densities(mode[None])[1][0])
    stages = progress.round.stages if progress.round is not None else []
    stage_rows = [f"| {k} | {s.lam:.2e} | {s.move.n_transitions} | {s.move.n_leapfrog} | "
                  f"{s.move.step_size:.3f} |" for k, s in enumerate(stages, 1)]
    text = f"""# The tempering-from-the-mode reference against the posterior

Written by `python benchmarks/reference_fit.py {args.checkpoint.name} --hidden-units \
{args.hidden_units}` on {datetime.date.today()} (Python {platform.python_version()}, PyMC \
{pymc.__version__}), from a checkpoint of a default `thermodynamic` fit of \
`robot_arm_mlp({args.hidden_units})`: its tempering from the found mode after \
{progress.sweeps_done} relaxation sweeps (earlier levels: {len(progress.levels)}). \
Log-likelihood at the mode: {mode_log_likelihood:.1f}. Percentiles of the log-likelihood:

| points | count | {' | '.join(f'{q} %' for q in PERCENTILES)} |
|---|--:|{'--:|' * len(PERCENTILES)}
""" + "\n".join(rows) + f"""

The tempering from the reference (half prior, half the Gaussian), stages saved so far \
({saved['sampling_seconds']:.0f} s of sampling in the fit, the first round's included):

| stage | λ | HMC transitions | leapfrog steps | step size |
|--:|--:|--:|--:|--:|
""" + "\n".join(stage_rows) + "\n"
    RESULTS.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
