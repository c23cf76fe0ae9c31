"""Is bridge's error bar honest on Bayesian MLPs, at its defaults?

``pm_evidence.bridge(model, random_seed=s)`` (NUTS, 4 chains × 2000 draws; the hidden layer
recognised in the graph, whose 2^h h! copies are counted) over several seeds, against the
references of ``mlp_calibration.py`` (importance sampling from a symmetrised t mixture, which
shares nothing with bridge). The role "permutations only" repeats two seeds with
``mlp_layers=None``: the whole-variable search then finds the units' permutations but not
their sign flips, what bridge counted before it took the layers.

Written: ``benchmarks/results/bridge_mlp.csv`` (one row per fit) and ``.md``.

Usage::

    python benchmarks/bridge_mlp.py --cases Liang              # half an hour on one core
    python benchmarks/bridge_mlp.py --cases "robot arm" --seeds 2
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

from mlp_calibration import CASES, CSV as REFERENCE_CSV, reference  # this directory

CSV = Path(__file__).resolve().parent / "results" / "bridge_mlp.csv"
MARKDOWN = CSV.with_suffix(".md")
#: Cases with an importance-sampling reference. On the robot arm (gamma precisions of its
#: weight groups) NUTS meets a funnel: at h = 1, a thousand divergences and R-hat 1.17.
BRIDGE_CASES = ("Liang H=1", "Liang H=2", "Liang H=3", "Liang H=4", "robot arm h=1")
ROLES = {"defaults": {}, "permutations only": {"mlp_layers": None}}
ROLE_SEEDS = {"defaults": 5, "permutations only": 2}


def fit(model, role: str, seed: int) -> dict:
    begun = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", pm_evidence.EvidenceWarning)
        result = pm_evidence.bridge(model, random_seed=seed, progressbar=False, **ROLES[role])
    row = result.diagnostics.iloc[0]
    return {"seed": seed, "log_z": result.log_evidence, "se": result.se,
            "copies": int(np.prod([s["copies"] for s in result.settings["symmetries"]])),
            "rhat": float(row["rhat_log_posterior"]), "divergences": int(row["divergences"]),
            "seconds": time.perf_counter() - begun,
            "warnings": " | ".join(str(w.message)[:80] for w in caught
                                   if issubclass(w.category, pm_evidence.EvidenceWarning))}


def summarise(table: pd.DataFrame, references: pd.DataFrame, command: str) -> str:
    import pymc as pm

    lines = [
        "# Bridge sampling's error bars on Bayesian MLPs, at the defaults", "",
        f"Written by `{command}` on {datetime.date.today()} (Python "
        f"{platform.python_version()}, PyMC {pm.__version__}, {os.cpu_count()} cores); rows "
        "of models not rerun are kept from earlier invocations.", "",
        "`bridge(model, random_seed=s)`: NUTS with 4 chains × 2000 draws after 1000 tuning "
        "steps, the hidden layer recognised in the graph and its 2^h h! copies counted. "
        "'permutations only': `mlp_layers=None`, which counts the units' h! permutations "
        "that the search over whole variables finds, not their sign flips. Reference: "
        "importance sampling (`mlp_calibration.md`). z: a fit's error in units of its SE and "
        "the reference's in quadrature. Warned: fits with an EvidenceWarning (divergences, a "
        "large relative error, R-hat).", "",
        "| model | reference | setting | copies | mean log Z | median SE | mean \\|z\\| | "
        "max \\|z\\| | within 2 SE | mean z | warned | max R-hat | s per fit |",
        "|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for (case, role), fits in table.groupby(["case", "role"], sort=False):
        ref, ref_se, _ = reference(references[references["case"] == case])
        z = (fits["log_z"] - ref) / np.hypot(fits["se"], ref_se)
        lines.append(
            f"| {case} | {ref:.3f} ± {ref_se:.3f} | {role} | {int(fits['copies'].iloc[0])} | "
            f"{fits['log_z'].mean():.3f} | {fits['se'].median():.3f} | {np.abs(z).mean():.2f} | "
            f"{np.abs(z).max():.2f} | {int((np.abs(z) <= 2).sum())}/{len(z)} | {z.mean():+.2f} | "
            f"{int((fits['warnings'].fillna('') != '').sum())}/{len(fits)} | "
            f"{fits['rhat'].max():.3f} | {fits['seconds'].mean():.0f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", default=None, metavar="TEXT",
                        help="run only the models whose name contains one of these")
    parser.add_argument("--seeds", type=int, default=None,
                        help="fits per model and role (default 5, permutations only 2)")
    args = parser.parse_args(argv)
    rows = []
    old = pd.read_csv(CSV) if CSV.exists() else pd.DataFrame(columns=["case", "role", "seed"])
    for case in BRIDGE_CASES:
        if args.cases and not any(text in case for text in args.cases):
            continue
        model = CASES[case][0]()
        for role in ROLES:
            for seed in range(1, 1 + (args.seeds or ROLE_SEEDS[role])):
                rows.append({"case": case, "role": role, **fit(model, role, seed)})
                print(f"{case}, {role}, {seed}: {rows[-1]['log_z']:.3f} ± {rows[-1]['se']:.3f} "
                      f"({rows[-1]['seconds']:.0f} s)", flush=True)
    new = pd.DataFrame(rows)
    keys = ["case", "role", "seed"]
    if not new.empty:
        old = old[~old.set_index(keys).index.isin(new.set_index(keys).index)]
    table = pd.concat([old, new], ignore_index=True)
    rank = {(c, r): i for i, (c, r) in enumerate((c, r) for c in BRIDGE_CASES for r in ROLES)}
    table = table.iloc[np.argsort([rank[(c, r)] for c, r in zip(table["case"], table["role"])],
                                  kind="stable")]
    table.to_csv(CSV, index=False)
    MARKDOWN.write_text(summarise(table, pd.read_csv(REFERENCE_CSV),
                                  " ".join(["python benchmarks/bridge_mlp.py", *argv])))
    print(MARKDOWN.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
