"""Bias of thermodynamic chaining on correlated Gaussians: metric and HMC moves per stage.

For d = 50 and 100, ``testing.correlated_gaussian(dim=d)`` (exact evidence) is estimated by
one round of four groups of 256 particles (``target_se=None``) for many seeds, with the default
moves and ``mass_matrix="dense"`` or ``"diag"``; at the largest d also with the dense metric
and the earlier, looser ``decorrelation=0.2``, and with a fixed 6 HMC transitions per stage
(``decorrelation=0, max_transitions=6``). Each run's estimate is the log of its groups'
mean evidence, so the log-mean-exp of the runs' errors is the error of all their groups averaged
on the evidence scale, which is unbiased if each group's evidence estimate is. Its standard
error follows from the groups' spread σ as √(expm1(σ²)/(4R)). Writes
``benchmarks/results/metric_bias.md``.

Usage::

    python benchmarks/metric_bias.py --seeds 20 --workers 2     # about 10 min on 2 cores
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.special import logsumexp

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "benchmarks" / "results" / "metric_bias.md"
N_GROUPS, N_PARTICLES, FIRST_SEED = 4, 256, 5000


#: The settings of the moves compared, by label.
MOVES = {
    "default": {},
    "decorrelation 0.2": dict(decorrelation=0.2),
    "fixed 6": dict(decorrelation=0.0, max_transitions=6),
}


def run(dim: int, metric: str, moves: str, seeds: int) -> dict:
    import pymc_evidence as pm_evidence
    from pymc_evidence.testing import correlated_gaussian

    model, exact = correlated_gaussian(dim=dim)
    errors, sigmas, n_transitions, start = [], [], [], time.perf_counter()
    for seed in range(FIRST_SEED, FIRST_SEED + seeds):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", pm_evidence.EvidenceWarning)
            result = pm_evidence.thermodynamic(
                model, target_se=None, n_groups=N_GROUPS, n_particles=N_PARTICLES,
                mass_matrix=metric, random_seed=seed, progressbar=False, cores=1, **MOVES[moves],
            )
        errors.append(result.log_evidence - exact)
        sigmas.append(result.group_log_sd)
        n_transitions.append(result.diagnostics["n_transitions"].mean())
    errors, sigma2 = np.array(errors), float(np.mean(np.square(sigmas)))
    return {
        "dim": dim, "metric": metric,
        "moves": moves,
        "mean_transitions": float(np.mean(n_transitions)), "runs": seeds,
        "error_of_average": float(logsumexp(errors) - np.log(seeds)),
        "its_se": float(np.sqrt(np.expm1(sigma2) / (N_GROUPS * seeds))),
        "mean_run_error": float(errors.mean()), "group_sd": float(np.sqrt(sigma2)),
        "seconds_per_run": (time.perf_counter() - start) / seeds,
    }


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dims", type=int, nargs="+", default=[50, 100])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    jobs = [(dim, metric, "default") for metric in ("diag", "dense") for dim in args.dims]
    jobs += [(max(args.dims), "dense", moves) for moves in ("decorrelation 0.2", "fixed 6")]
    jobs.sort(key=lambda job: -job[0])  # the largest first, so that the workers finish together
    start = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:
        rows = list(pool.map(run, *zip(*jobs), [args.seeds] * len(jobs)))
    import pymc as pm

    table = pd.DataFrame(rows).sort_values(["dim", "metric", "moves"])
    text = "\n".join([
        "# Bias of chaining on correlated Gaussians: metric and HMC moves per stage",
        "",
        f"Written by `benchmarks/metric_bias.py` on {datetime.date.today()} "
        f"(Python {platform.python_version()}, PyMC {pm.__version__}, {os.cpu_count()} cores); "
        f"command `python benchmarks/metric_bias.py {' '.join(argv)}`, "
        f"{(time.perf_counter() - start) / 60:.1f} min wall.",
        "",
        f"`testing.correlated_gaussian(dim)`; per run one round of {N_GROUPS} groups of "
        f"{N_PARTICLES} particles (`target_se=None`), seeds {FIRST_SEED}…; `error_of_average` = "
        "log-mean-exp of the runs' errors (all groups averaged on the evidence scale), `its_se` "
        "= √(expm1(σ²)/(groups)) from the mean group variance σ²; `mean_run_error` is on the log "
        "scale (expected ≈ −σ²/8 for an unbiased run of four groups).",
        "",
        table.to_markdown(index=False, floatfmt=".3f"),
        "",
    ])
    args.output.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
