"""Is each nested-sampling run's own SE right? 16 runs per fit of the conjugate regression
(d = 5, exact evidence) over many seeds, at nested()'s defaults with a fixed number of runs.

Two questions: do the runs' errors match their simulated-volume SEs (RMS of z_run ≈ 1), and are
the 16 runs of one fit independent (the fit-level z, 4 × mean z_run, has SD ≈ 1)?

    python benchmarks/nested_run_calibration.py      # writes results/nested_run_calibration.md
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np

import pymc_evidence as pm_evidence
from pymc_evidence import testing

OUTPUT = Path(__file__).resolve().parent / "results" / "nested_run_calibration.md"
RUNS = 16


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=80)
    args = parser.parse_args()
    model, exact = testing.conjugate_regression(dim=5)
    run_z, fit_z, run_mean_z, seconds = [], [], [], []
    for seed in range(args.seeds):
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = pm_evidence.nested(model, random_seed=seed, progressbar=False, target_se=None,
                                     n_runs=RUNS, max_runs=RUNS)
        seconds.append(time.perf_counter() - start)
        z = (np.array(res.run_log_evidence) - exact) / np.array(res.run_se)
        run_z.extend(z)
        run_mean_z.append(z.mean() * np.sqrt(RUNS))
        fit_z.append((res.log_evidence - exact) / res.se)
        print(f"seed {seed}: fit z {fit_z[-1]:+.2f}", flush=True)
    run_z, fit_z, run_mean_z = map(np.array, (run_z, fit_z, run_mean_z))
    lines = [
        "# Calibration of each nested-sampling run's SE", "",
        f"Written by `benchmarks/nested_run_calibration.py`: `testing.conjugate_regression(dim=5)`"
        f" (exact log Z), nested() at its defaults with {RUNS} runs per fit, {args.seeds} seeds "
        f"({run_z.size} runs). z = (estimate − exact) / SE. Median {np.median(seconds):.1f} s "
        "per fit; Python 3.11 stack, one BLAS thread.", "",
        "| | value | calibrated |", "|---|---:|---:|",
        f"| RMS z of single runs (own simulated-volume SE) | {np.sqrt(np.mean(run_z**2)):.3f} "
        f"| 1 ± {1 / np.sqrt(2 * run_z.size):.3f} |",
        f"| mean z of single runs | {run_z.mean():+.3f} | 0 ± {1 / np.sqrt(run_z.size):.3f} |",
        f"| SD over fits of √{RUNS} × mean z_run (runs independent?) | "
        f"{run_mean_z.std(ddof=1):.3f} | 1 ± {1 / np.sqrt(2 * args.seeds):.3f} |",
        f"| RMS z of fits (reported SE) | {np.sqrt(np.mean(fit_z**2)):.3f} | 1 ± "
        f"{1 / np.sqrt(2 * args.seeds):.3f} |",
        f"| mean abs z of fits | {np.abs(fit_z).mean():.3f} | 0.798 |",
        f"| fits within 2 SE | {np.mean(np.abs(fit_z) < 2):.1%} | 95.4 % |",
        f"| largest abs z of a fit | {np.abs(fit_z).max():.2f} | |", "",
    ]
    OUTPUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
