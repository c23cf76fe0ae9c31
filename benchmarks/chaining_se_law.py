"""How well does thermodynamic chaining's SE cover its error, fit by fit: as estimated, and
with the between-group SE widened by Student's t as the package reports it.

Chaining's SE is the larger of two estimates (``_stepping_stone.stepping_stone``): the
within-group error propagated from the stages' weights, which has many degrees of freedom but
runs low where resampling correlates the particles (on a centred hierarchy's funnel, about half
the true error), and the spread between the G independent groups, right on average but
estimated from G − 1 degrees of freedom: with the default four groups, ±2 SE of a spread-based
SE covers the error like a Student t with 3 degrees of freedom, 86 % rather than 95 %.

For each case of ``thermodynamic_vs_smc._cases`` (exact log evidence) and each seed this runs
``pm_evidence.thermodynamic`` as a user would (defaults, or the ``--layout`` given: groups ×
particles per group at the same cost) and records the estimate, the reported SE and its parts:
within, between, the number of groups G, and ``extra``, what the effort check and the mode
search added to the stepping-stone SE (usually nothing). The report then scores, on the same
fits, the SE laws

* ``as estimated``: max(within, between), the SE the estimate's own spread gives;
* ``Student``: max(within, c_G · between), c_G = t_{G−1}(0.975) / z(0.975), so that ±1.96 SE
  is a 95 % interval when the groups' spread alone sets the SE (c = 1.62 at G = 4, 1.21 at 8,
  1.04 at 32),

each combined with ``extra`` as the package does (root sum of squares). A fit stops adding
groups when its reported SE reaches ``target_se``, so the law also decides how many groups it
runs: the CSV marks by which law each fit stopped (``stopped_by``: the package's law when it
ran), and the report scores both laws on the fits of each.

Usage::

    python benchmarks/chaining_se_law.py --seeds 100                # every cheap case
    python benchmarks/chaining_se_law.py --seeds 100 --layout 8x128 # 8 groups of 128
    python benchmarks/chaining_se_law.py --report                   # the report from the CSV

Written: ``benchmarks/results/chaining_se_law.md`` and ``.csv`` (the runs; a fit it holds for
the package's law, layout, case and seed is not run again).
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
from pymc_evidence.estimators._stepping_stone import student_factor
from evidence_calibration import _notes
from thermodynamic_vs_smc import EXPENSIVE_CASES, _cases

#: The law by which the package reports its SE and stops adding groups (``reported_se``); the
#: CSV's column ``stopped_by`` keeps it for every fit, and runs made before the package widened
#: its SE are marked "as estimated".
PACKAGE_LAW = "Student"
ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "benchmarks" / "results" / "chaining_se_law.md"


def run(model, exact: float, seed: int, layout: str) -> dict:
    options = {}
    if layout != "defaults":
        groups, particles = (int(x) for x in layout.split("x"))
        options = {"n_groups": groups, "n_particles": particles, "max_groups": 8 * groups}
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pm_evidence.EvidenceWarning)
        result = pm_evidence.thermodynamic(model, random_seed=seed, progressbar=False,
                                           **options)
    # what the package reports before the effort check and the mode search add to it
    stepping_stone_se = max(result.se_within, student_factor(result.n_groups) * result.se_between)
    return {"log_z": result.log_evidence, "exact": exact, "se": result.se,
            "within": result.se_within, "between": result.se_between,
            "groups": result.n_groups,
            "extra": float(np.sqrt(max(result.se**2 - stepping_stone_se**2, 0.0))),
            "seconds": time.perf_counter() - start}


def _student_factors(groups: pd.Series) -> np.ndarray:
    return np.array([student_factor(int(g)) for g in groups])


LAWS = {
    "as estimated": lambda r: np.hypot(np.maximum(r.within, r.between), r.extra),
    "Student": lambda r: np.hypot(np.maximum(r.within, _student_factors(r.groups) * r.between),
                                  r.extra),
}


def score(runs: pd.DataFrame) -> pd.DataFrame:
    rows = []
    keys = ["stopped_by", "layout", "case"]
    for (stopped_by, layout, case), group in runs.groupby(keys, sort=False):
        error = group["log_z"] - group["exact"]
        for law, se_of in LAWS.items():
            se = se_of(group)
            z = np.abs(error) / se
            rows.append({
                "stopped_by": stopped_by, "layout": layout, "case": case, "law": law,
                "fits": len(group),
                "groups": float(group["groups"].mean()), "rmse": float(np.sqrt(np.mean(error**2))),
                "rms_se": float(np.sqrt(np.mean(se**2))), "mean_abs_z": float(z.mean()),
                "within_2": float(np.mean(z <= 2)), "within_3": float(np.mean(z <= 3)),
                "max_z": float(z.max()), "seconds": float(group["seconds"].mean()),
            })
    return pd.DataFrame(rows)


def pooled(runs: pd.DataFrame) -> pd.DataFrame:
    """Every case of a layout together (each fit counts once)."""
    rows = []
    for (stopped_by, layout), group in runs.groupby(["stopped_by", "layout"], sort=False):
        error = np.abs(group["log_z"] - group["exact"])
        for law, se_of in LAWS.items():
            z = error / se_of(group)
            rows.append({"stopped_by": stopped_by, "layout": layout, "law": law,
                         "fits": len(group),
                         "mean_abs_z": float(z.mean()), "within_2": float(np.mean(z <= 2)),
                         "within_3": float(np.mean(z <= 3)), "max_z": float(z.max())})
    return pd.DataFrame(rows)


def report(runs: pd.DataFrame, notes: str) -> str:
    import pymc as pm

    lines = [
        "# Chaining's SE fit by fit: as estimated, and widened for few groups", "",
        f"Written by `python benchmarks/chaining_se_law.py` on {datetime.date.today()}: Python "
        f"{platform.python_version()}, PyMC {pm.__version__}, {os.cpu_count()} cores. Each fit "
        "is `pm_evidence.thermodynamic(model, random_seed=seed)` on a case with an exact "
        "evidence, at the defaults (4 groups of 256 particles, `target_se=0.1`) or at the "
        "layout given (groups × particles per group, `max_groups` 8 × groups). Laws: *as "
        "estimated* = max(within, between); *Student* = max(within, c_G × between), "
        "c_G = t_{G−1}(0.975) / 1.96; both combined with what the effort check added. "
        "|z| = |error| / SE: a calibrated SE gives mean |z| 0.80, 95 % within 2 SE and 99.7 % "
        "within 3.", "",
        "| stopped by | layout | case | law | fits | mean groups | RMSE | RMS SE | mean abs z "
        "| within 2 SE | within 3 SE | max abs z | seconds |",
        "|---|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in score(runs).itertuples():
        lines.append(f"| {r.stopped_by} | {r.layout} | {r.case} | {r.law} | {r.fits} "
                     f"| {r.groups:.1f} "
                     f"| {r.rmse:.3f} | {r.rms_se:.3f} | {r.mean_abs_z:.2f} | {r.within_2:.0%} "
                     f"| {r.within_3:.0%} | {r.max_z:.2f} | {r.seconds:.2f} |")
    lines += ["", "Every case together:", "",
              "| stopped by | layout | law | fits | mean abs z | within 2 SE | within 3 SE "
              "| max abs z |",
              "|---|---|---|--:|--:|--:|--:|--:|"]
    for r in pooled(runs).itertuples():
        lines.append(f"| {r.stopped_by} | {r.layout} | {r.law} | {r.fits} | {r.mean_abs_z:.2f} "
                     f"| {r.within_2:.1%} | {r.within_3:.1%} | {r.max_z:.2f} |")
    lines += ["", "## Notes", "", notes.strip() or "(written by hand after the run)", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    all_cases = _cases()
    cheap = [name for name in all_cases if name not in EXPENSIVE_CASES]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--cases", nargs="+", choices=list(all_cases), default=cheap)
    parser.add_argument("--layout", default="defaults",
                        help="'defaults' or GROUPSxPARTICLES, e.g. 8x128")
    parser.add_argument("--report", action="store_true", help="only rewrite the report")
    args = parser.parse_args(argv)
    csv = OUTPUT.with_suffix(".csv")
    rows = pd.read_csv(csv).to_dict("records") if csv.exists() else []
    if not args.report:
        done = {(r["stopped_by"], r["layout"], r["case"], r["seed"]) for r in rows}
        for name in args.cases:
            model, exact = all_cases[name][1]()
            for seed in range(args.seeds):
                if (PACKAGE_LAW, args.layout, name, seed) in done:
                    continue
                rows.append({"stopped_by": PACKAGE_LAW, "layout": args.layout, "case": name,
                             "seed": seed,
                             **run(model, exact, seed, args.layout)})
                r = rows[-1]
                print(f"{args.layout} {name} {seed}: {r['log_z'] - exact:+.3f} ± {r['se']:.3f} "
                      f"(G {r['groups']})", flush=True)
                if seed % 10 == 9:
                    pd.DataFrame(rows).to_csv(csv, index=False)
        pd.DataFrame(rows).to_csv(csv, index=False)
    OUTPUT.write_text(report(pd.DataFrame(rows), _notes(OUTPUT)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
