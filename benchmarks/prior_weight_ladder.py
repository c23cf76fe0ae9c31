"""How much of the ladder from the mode does the reference's prior weight cost?

An experiment, not a setting of the package. The reference that `thermodynamic` tempers from
at a found mode is ``PRIOR_WEIGHT`` (one half) times the prior plus the rest times a Gaussian
fitted to a population relaxed at the mode. The ladder's first stages are set by how far
below the posterior the reference's draws lie, so a smaller prior weight could shorten it.

Measured without running the tempering: the early stages of the adaptive ladder are those of
an importance-weighted sample. ``--draws`` exact draws from each of the reference's two parts
(kept in the mode's domain, as the tempering keeps its particles) stand for q at any prior
weight w (weight w on the prior's draws, 1 − w on the Gaussian's); reweighted by
(p L / q)^λ they stand for each tempered law, and the package's own rule
(``_tempering._next_lambda``: the conditional ESS of the increment at ``--target-cess`` of
its value at δ → 0) gives the next λ. The simulation holds while the weighted sample's ESS
stays large (the table stops below ``--min-ess``), which covers λ up to about 1e-3; next to it,
the λ that the fit's own ladder took with its particles and HMC moves.

It reads a checkpoint of a default fit (``mlp_calibration.py --checkpoints DIR``) whose
tempering from the mode has fitted its reference.

Written: ``benchmarks/results/prior_weight_ladder.md``.

Usage::

    python benchmarks/prior_weight_ladder.py DIR/robot_arm_h=3_defaults_2.ckpt --hidden-units 3
"""

from __future__ import annotations

import argparse
import datetime
import pickle
import platform
from pathlib import Path

import numpy as np
import pymc

import pymc_evidence as pm_evidence
from pymc_evidence.estimators import _reference
from pymc_evidence.estimators._tempering import _increment, _next_lambda
from pymc_evidence.testing import ROBOT_ARM_LAYER, robot_arm_mlp

from evidence_calibration import _notes  # this directory: first on sys.path

RESULTS = Path(__file__).parent / "results" / "prior_weight_ladder.md"
#: The package's own weight, restored after drawing each part alone.
PACKAGE_PRIOR_WEIGHT = _reference.PRIOR_WEIGHT


def component_draws(reference, rng, draws: int) -> tuple[np.ndarray, np.ndarray]:
    """``draws`` draws of the reference's prior part and as many of its Gaussian part, both
    as its ``prior_draws`` makes them (in the mode's domain)."""
    parts = []
    for weight in (1.0, 0.0):
        _reference.PRIOR_WEIGHT = weight
        parts.append(reference.prior_draws(rng, draws))
    _reference.PRIOR_WEIGHT = PACKAGE_PRIOR_WEIGHT
    return parts[0], parts[1]


def simulated_ladder(log_prior, log_likelihood, log_gaussian, from_prior, weight: float,
                     target_cess: float, min_ess: float, max_stages: int) -> list[tuple]:
    """Stages (λ, ESS of the weighted sample, the prior draws' share of the tempered law) of
    the adaptive ladder from q = ``weight`` × prior + (1 − ``weight``) × Gaussian."""
    n = len(log_prior) // 2
    log_q = np.logaddexp(np.log(weight) + log_prior, np.log1p(-weight) + log_gaussian)
    ell = log_prior + log_likelihood - log_q
    ell = np.where(np.isnan(ell), -np.inf, ell)
    # each half of the sample stands for its part's share of q
    base = np.where(from_prior, np.log(weight), np.log1p(-weight)) - np.log(n)
    stages, lam = [], 0.0
    while lam < 1.0 and len(stages) < max_stages:
        log_w = base + _increment(ell, lam)
        log_w -= np.logaddexp.reduce(log_w)
        w = np.exp(log_w)
        ess = 1.0 / np.sum(w**2)
        if ess < min_ess:
            break
        lam = _next_lambda(log_w[None], ell[None], lam, target_cess)
        stages.append((lam, ess, float(w[from_prior].sum())))
    return stages


def report(argv: str, fit_stages: list, ladders: dict, medians: tuple, draws: int,
           target_cess: float) -> str:
    weights = list(ladders)
    lines = [
        "# The reference's prior weight and the ladder from the mode",
        "",
        f"Written by `python benchmarks/prior_weight_ladder.py {argv}` on "
        f"{datetime.date.today()} (Python {platform.python_version()}, PyMC "
        f"{pymc.__version__}). λ of the adaptive ladder (conditional ESS at {target_cess} of "
        f"its value at δ → 0) from q = w × prior + (1 − w) × the Gaussian at the mode, "
        f"simulated with {draws:,} draws of each part reweighted by (p L / q)^λ; beside it "
        "the λ that the fit's own ladder took (w = 0.5, with its particles and HMC moves). "
        "In brackets at w = 0.5: the weighted sample's ESS and the prior draws' share of the "
        "tempered law.",
        "",
        f"Median log-likelihood of the prior's draws {medians[0]:,.0f}, of the Gaussian's "
        f"{medians[1]:,.0f}.",
        "",
        "| stage | the fit: λ | " + " | ".join(f"w = {w}: λ" for w in weights) + " |",
        "|--:|--:|" + "--:|" * len(weights),
    ]
    rows = max(len(fit_stages), *(len(s) for s in ladders.values()))
    for k in range(rows):
        cells = [f"{fit_stages[k]:.2e}" if k < len(fit_stages) else ""]
        for w in weights:
            if k >= len(ladders[w]):
                cells.append("")
                continue
            lam, ess, share = ladders[w][k]
            cells.append(f"{lam:.2e} ({ess:,.0f}, {share:.2f})" if w == PACKAGE_PRIOR_WEIGHT
                         else f"{lam:.2e}")
        lines.append(f"| {k + 1} | " + " | ".join(cells) + " |")
    lines.append("")
    notes = _notes(RESULTS) or "\nHand-written; kept when the script rewrites the table.\n"
    return "\n".join(lines) + "\n## Notes\n" + notes


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", type=Path, help="checkpoint of a default fit")
    parser.add_argument("--hidden-units", type=int, required=True)
    parser.add_argument("--weights", type=float, nargs="+", default=[0.5, 0.2, 0.05, 0.01])
    parser.add_argument("--draws", type=int, default=20_000, help="per part of q")
    parser.add_argument("--target-cess", type=float, default=0.95,
                        help="the ladder's (the MLP ladder's by default)")
    parser.add_argument("--min-ess", type=float, default=1_000.0)
    parser.add_argument("--max-stages", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    saved = pickle.loads(args.checkpoint.read_bytes())
    from_mode = saved["state"]["from_mode"]
    progress = from_mode["progress"]
    if progress.gaussian is None:
        raise SystemExit(f"{args.checkpoint} has not fitted its reference yet")
    density = pm_evidence.get_density(robot_arm_mlp(args.hidden_units))
    reference = _reference.DomainReference(density, [ROBOT_ARM_LAYER],
                                           np.asarray(from_mode["mode"]), progress.gaussian)
    rng = np.random.default_rng(args.seed)
    prior_part, gaussian_part = component_draws(reference, rng, args.draws)
    X = np.concatenate([prior_part, gaussian_part])
    from_prior = np.arange(len(X)) < args.draws
    log_prior, log_likelihood = density.log_densities(X)
    log_gaussian = reference._log_gaussian(X)[0]
    ladders = {w: simulated_ladder(log_prior, log_likelihood, log_gaussian, from_prior, w,
                                   args.target_cess, args.min_ess, args.max_stages)
               for w in args.weights}
    fit_stages = [s.lam for s in progress.round.stages] if progress.round is not None else []
    medians = (float(np.median(log_likelihood[from_prior])),
               float(np.median(log_likelihood[~from_prior])))
    shown = (f"{args.checkpoint.name} --hidden-units {args.hidden_units}"
             + ("" if args.weights == parser.get_default("weights")
                else " --weights " + " ".join(map(str, args.weights))))
    text = report(shown, fit_stages[: args.max_stages], ladders, medians, args.draws,
                  args.target_cess)
    RESULTS.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
