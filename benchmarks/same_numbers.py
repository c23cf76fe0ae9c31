"""Fingerprint every estimator's output for fixed seeds, to show a refactoring changed no number.

Each case runs one estimator (or ``compare``) on a small model of ``pymc_evidence.testing`` with a
fixed seed and records, bit for bit, the log evidence, its SE, the other estimates, every
diagnostics column and every posterior / sample-stats array (as SHA-256 of the raw bytes).

    python benchmarks/same_numbers.py --save benchmarks/results/same_numbers_py311.json
    python benchmarks/same_numbers.py --check benchmarks/results/same_numbers_py311.json

``--check`` exits non-zero and lists every differing entry. Numbers differ between the two
supported stacks (PyMC 5 / 6 draw differently), so each stack has its own file. About 3 min.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import warnings

import numpy as np
import pandas as pd

import pymc_evidence as pm_evidence
from pymc_evidence import testing
from pymc_evidence.results import _RENAMED
from pymc_evidence.symmetry import MLPLayer


def _digest(array) -> str:
    array = np.ascontiguousarray(np.asarray(array))
    if array.dtype == object:
        return hashlib.sha256(repr(array.tolist()).encode()).hexdigest()[:16]
    return f"{array.dtype}{array.shape}:" + hashlib.sha256(array.tobytes()).hexdigest()[:16]


def _number(value) -> str:
    try:
        return float(value).hex()
    except (TypeError, ValueError):
        return repr(value)


def estimates_of(result) -> dict:
    """The estimates beside the main one under the names of the saved fingerprints (those of
    files written before results were typed): hyperparameters flattened, fields renamed back."""
    old_name = {new: old for old, new in _RENAMED.items()}
    out = {}
    for name, value in result.estimates.items():
        if isinstance(value, dict):
            out.update(value)
        else:
            out[old_name.get(name, name)] = value
    return out


def fingerprint(result) -> dict:
    out = {
        "log_evidence": _number(result.log_evidence),
        "se": _number(result.se),
        "estimates": {k: _number(v) for k, v in sorted(estimates_of(result).items())},
        "diagnostics": {str(c): _digest(result.diagnostics[c].to_numpy())
                        for c in result.diagnostics.columns},
        "warnings": len(result.warnings),
    }
    for group in ("posterior", "sample_stats"):
        values = getattr(result, group) or {}
        out[group] = {k: _digest(v) for k, v in sorted(values.items())}
    return out


def _liang():
    x, y = testing.liang_data(n=30, seed=0)
    return testing.liang_mlp(2, x, y)


def cases():
    """name -> zero-argument callable returning a result or a compare table."""
    quiet = dict(progressbar=False)
    bb, _ = testing.beta_binomial()
    reg, _ = testing.conjugate_regression(dim=3)
    mix, _ = testing.gaussian_mixture_potential()
    regs = [testing.conjugate_regression(dim=k, seed=0, name=f"k{k}")[0] for k in (1, 2)]
    layer = MLPLayer("z_in", bias="z_bias")
    return {
        "thermodynamic_bb": lambda: pm_evidence.thermodynamic(
            bb, n_particles=64, target_se=0.05, random_seed=1, cores=1, **quiet),
        "thermodynamic_bb_cores2": lambda: pm_evidence.thermodynamic(
            bb, n_particles=64, target_se=0.05, random_seed=1, cores=2, **quiet),
        "thermodynamic_mixture_ladder": lambda: pm_evidence.thermodynamic(
            mix, n_particles=64, target_se=None, ladder=pm_evidence.power_ladder(12),
            random_seed=2, **quiet),
        "thermodynamic_checkpoint": lambda: _with_checkpoint(reg),
        "laplace_reg": lambda: pm_evidence.laplace(reg, restarts=3, random_seed=3, **quiet),
        "laplace_mackay": lambda: pm_evidence.laplace(
            reg, framework="mackay", groups={"w": "w"}, noise="y", restarts=2, random_seed=0,
            **quiet),
        "bic_reg": lambda: pm_evidence.bic(reg, random_seed=4, **quiet),
        "bridge_bb": lambda: pm_evidence.bridge(
            bb, draws=400, tune=300, chains=2, random_seed=5, **quiet),
        "cmc_regs": lambda: pm_evidence.cmc(regs, stage_length=100, delta_end=1e-2,
                                            random_seed=6, **quiet),
        "compare_laplace": lambda: pm_evidence.compare(
            {"k=1": regs[0], "k=2": regs[1]}, method="laplace", random_seed=7, **quiet),
        "compare_thermodynamic": lambda: pm_evidence.compare(
            {"k=1": regs[0], "k=2": regs[1]}, method="thermodynamic", random_seed=8,
            n_particles=64, target_se=None, **quiet),
        "thermodynamic_liang_mlp": lambda: pm_evidence.thermodynamic(
            _liang(), n_particles=32, target_se=None, mlp_layers=layer, random_seed=9, **quiet),
        "nested_mixture": lambda: pm_evidence.nested(
            mix, n_live=100, target_se=None, n_runs=2, random_seed=11, cores=1, **quiet),
        "nested_liang_mlp": lambda: pm_evidence.nested(
            _liang(), n_live=60, target_se=None, n_runs=2, mlp_layers=layer,
            moves_check=False, random_seed=12, cores=1, **quiet),
        "nested_moves_check": lambda: pm_evidence.nested(
            bb, n_live=50, target_se=None, n_runs=2, moves_check=True, random_seed=13,
            cores=1, **quiet),
    }


def _with_checkpoint(model):
    with tempfile.TemporaryDirectory() as tmp:
        return pm_evidence.thermodynamic(
            model, n_particles=64, target_se=None, checkpoint=f"{tmp}/run.ckpt", random_seed=10,
            progressbar=False)


def run() -> dict:
    table = {}
    for name, make in cases().items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = make()
        if isinstance(out, pd.DataFrame):  # a compare table
            table[name] = {str(c): [_number(v) for v in out[c]] for c in out.columns}
        elif isinstance(out, dict):  # cmc: one result per model
            table[name] = {k: fingerprint(v) for k, v in out.items()}
        else:
            table[name] = fingerprint(out)
        print(f"{name}: done", flush=True)
    return table


def differences(old, new, path="") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new)):
            if key not in new:
                out.append(f"{path}/{key}: only in saved")
            elif key not in old:  # a field added since (e.g. an unused optional one) is no change
                continue
            else:
                out.extend(differences(old[key], new[key], f"{path}/{key}"))
        return out
    return [] if old == new else [f"{path}: {old} -> {new}"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--save", help="write the fingerprints to this JSON file")
    group.add_argument("--check", help="compare against fingerprints saved in this JSON file")
    args = parser.parse_args()
    print(f"pymc_evidence from {pm_evidence.__file__}")
    table = run()
    if args.save:
        with open(args.save, "w") as f:
            json.dump(table, f, indent=1, sort_keys=True)
        return 0
    with open(args.check) as f:
        saved = json.load(f)
    diffs = differences(saved, table)
    print("\n".join(diffs) if diffs else "identical: every number and array matches")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
