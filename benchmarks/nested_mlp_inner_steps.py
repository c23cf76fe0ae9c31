"""How many slice moves per replacement nested sampling needs on Bayesian MLPs.

On an MLP posterior the constrained prior is curved along the hyperparameters (an output
weight w = z/√α of the non-centred model moves along a curve as α shrinks), and replacements
that move too little leave the live points lagging behind the contracting region: each run's
contour log L* rises too slowly with log X and its evidence comes out low, by more than its own
error bar. This study runs ``pm_evidence.nested`` on two MLPs at several ``num_inner_steps``
(multiples of the dimension d), a fixed number of independent runs each, beside thermodynamic
chaining, at the settings of the MLP docs and with 8 times their particles (the reference):

* ``robot_arm_mlp(2)`` (17 parameters, Neal-style gamma hyperpriors), ``ROBOT_ARM_LAYER``;
* Liang's example-1 MLP with H = 3 hidden units (``liang_mlp(3, *liang_data())``, 10
  parameters, output weights integrated out), ``MLPLayer("z_in", bias="z_bias")``.

Written: ``benchmarks/results/nested_mlp_inner_steps.csv`` (one row per run) and ``.md``.

Usage::

    python benchmarks/nested_mlp_inner_steps.py            # about an hour on 2 cores
    python benchmarks/nested_mlp_inner_steps.py --only "Liang H=3: nested 80"   # one setting
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

import pymc_evidence as pm_evidence
from pymc_evidence import MLPLayer
from pymc_evidence.testing import ROBOT_ARM_LAYER, liang_data, liang_mlp, robot_arm_mlp

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT / "benchmarks" / "results" / "nested_mlp_inner_steps.csv"
MARKDOWN = CSV.with_suffix(".md")
#: Chaining as the MLP docs run it, and with 8 times the particles (two seeds): the reference.
ROBOT_ARM_CHAINING = dict(n_groups=4, max_groups=4, target_cess=0.95, target_se=0.3)
LIANG_CHAINING = dict(n_groups=4, max_groups=8)
#: (name, model factory, layer, chaining [(particles, settings, seeds)], nested [(moves per
#: parameter, runs)])
CASES = [
    ("robot arm h=2", lambda: robot_arm_mlp(2), ROBOT_ARM_LAYER,
     [(64, ROBOT_ARM_CHAINING, (1,)), (512, ROBOT_ARM_CHAINING, (11, 12))],
     [(5, 6), (20, 6), (40, 2)]),
    ("Liang H=3", lambda: liang_mlp(3, *liang_data()), MLPLayer("z_in", bias="z_bias"),
     [(128, LIANG_CHAINING, (1,)), (1024, LIANG_CHAINING, (11, 12))],
     [(5, 6), (20, 6), (40, 4), (80, 4)]),
]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", default=None, metavar="TEXT",
                        help="run only the settings whose label ('robot arm h=2: nested 20 d', "
                        "'Liang H=3: chaining 1024') contains one of these; their rows replace "
                        "the same settings' rows in the CSV, the others are kept")
    args = parser.parse_args(argv)
    rows = []
    for case_index, (name, build, layer, chaining, grid) in enumerate(CASES):
        model = build()
        dim = pm_evidence.get_density(model).dim
        settings = [(f"chaining {particles}", particles, options, seeds)
                    for particles, options, seeds in chaining]
        settings += [(f"nested {multiple} d", multiple, None, runs) for multiple, runs in grid]
        for label, size, options, repeats in settings:
            if args.only and not any(text in f"{name}: {label}" for text in args.only):
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", pm_evidence.EvidenceWarning)
                if options is not None:
                    for seed in repeats:
                        begun = time.perf_counter()
                        result = pm_evidence.thermodynamic(
                            model, mlp_layers=layer, n_particles=size, random_seed=seed,
                            progressbar=False, cores=1, **options)
                        rows.append({"case": name, "dim": dim, "setting": label, "run": seed,
                                     "log_z": result.log_evidence, "se": result.se,
                                     "seconds": time.perf_counter() - begun})
                        print(f"{name}: {label}, seed {seed}: {result.log_evidence:.2f} ± "
                              f"{result.se:.2f}", flush=True)
                    continue
                begun = time.perf_counter()
                result = pm_evidence.nested(
                    model, mlp_layers=layer, num_inner_steps=size * dim, n_runs=repeats,
                    max_runs=repeats, target_se=None, random_seed=100 * case_index + size,
                    progressbar=False, cores=2,
                )
            seconds = (time.perf_counter() - begun) / repeats
            for run, (log_z, se) in enumerate(zip(result.run_log_evidence, result.run_se)):
                rows.append({"case": name, "dim": dim, "setting": label, "run": run,
                             "log_z": log_z, "se": se, "seconds": seconds})
            print(f"{name}: {label}: {result.log_evidence:.2f} ± {result.se:.2f}", flush=True)
    table = pd.DataFrame(rows)
    if args.only and CSV.exists():
        old = pd.read_csv(CSV)
        keep = ~old.set_index(["case", "setting"]).index.isin(
            table.set_index(["case", "setting"]).index)
        table = pd.concat([old[keep], table], ignore_index=True)
    labels = [f"{name}: {label}" for name, _, _, chaining, grid in CASES
              for label in [f"chaining {p}" for p, _, _ in chaining]
              + [f"nested {m} d" for m, _ in grid]]
    rank = [labels.index(f"{c}: {s}") for c, s in zip(table["case"], table["setting"])]
    table = table.iloc[np.argsort(rank, kind="stable")].reset_index(drop=True)
    table.to_csv(CSV, index=False)
    MARKDOWN.write_text(summarise(table, " ".join(
        ["python benchmarks/nested_mlp_inner_steps.py", *argv])))
    print(MARKDOWN.read_text())
    return 0


def _pooled(runs: pd.DataFrame) -> tuple[float, float]:
    """Mean log Z of independent runs or fits and its SE: the larger of their own errors
    combined and their spread. (The mean of the logs shows the lag studied here directly;
    nested() itself averages the runs' evidences.)"""
    count, sd = len(runs), runs["log_z"].std(ddof=1) if len(runs) > 1 else 0.0
    return runs["log_z"].mean(), max(sd / np.sqrt(count),
                                     float(np.sqrt(np.sum(runs["se"] ** 2))) / count)


def summarise(table: pd.DataFrame, command: str) -> str:
    import pymc as pm

    lines = [
        "# Nested sampling on MLPs: slice moves per replacement",
        "",
        f"Written by `{command}` on {datetime.date.today()} "
        f"(Python {platform.python_version()}, PyMC {pm.__version__}, {os.cpu_count()} cores); "
        "rows of settings not rerun are kept from earlier invocations. "
        "Nested: default `n_live` (25 d), `mlp_layers`, `target_se=None`, a fixed number of "
        "independent runs per setting, two at a time on two cores. Chaining: `mlp_layers`, the "
        "particles per group shown (4 groups), one process, one fit per seed. log Z: mean ± "
        "SE of the runs (or fits), the SE being the larger of their own errors combined and "
        "their spread; run SD / run SE: the runs' standard deviation against their median own "
        "SE (≈ 1 when the runs' error bars describe their spread); Δ: the difference to the "
        "long chaining (the most particles) in units of the combined SE. Seconds: per nested "
        "run, per chaining fit.",
        "",
        "| model | d | setting | runs | log Z | run SD / run SE | Δ to long chaining (SE) "
        "| s per run |",
        "|---|--:|---|--:|--:|--:|--:|--:|",
    ]
    for name, rows in table.groupby("case", sort=False):
        chaining = rows[rows["setting"].str.startswith("chaining")]
        longest = max(chaining["setting"], key=lambda label: int(label.split()[1]))
        ref, ref_se = _pooled(chaining[chaining["setting"] == longest])
        for label, runs in rows.groupby("setting", sort=False):
            mean, se = _pooled(runs)
            spread = (f"{runs['log_z'].std(ddof=1) / runs['se'].median():.2f}"
                      if label.startswith("nested") else "")
            delta = "" if label == longest else f"{(mean - ref) / np.hypot(se, ref_se):+.1f}"
            lines.append(
                f"| {name} | {rows['dim'].iloc[0]} | {label} | {len(runs)} | {mean:.2f} ± "
                f"{se:.2f} | {spread} | {delta} | {runs['seconds'].mean():.0f} |")
    lines += ["", "Each run's log Z and SE: `nested_mlp_inner_steps.csv`.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
