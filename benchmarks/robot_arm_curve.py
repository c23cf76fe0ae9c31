"""The robot-arm evidence curve end to end: total wall time and per-h standard error.

Runs ``examples/robot_arm.py`` (thermodynamic chaining and Laplace for each h, in parallel
processes) with the given settings, times the whole run, and writes
``benchmarks/results/robot_arm_curve.md``: per h the chaining log evidence, its SE, whether the
target SE was met, and the seconds spent; then the total, against the goal of h = 1…24
with SE ≤ 0.3 nat each in under 30 minutes on 2 cores.

Usage::

    python benchmarks/robot_arm_curve.py --hidden 1 2 3 4 6 8 --workers 2
    python benchmarks/robot_arm_curve.py --from-csv examples/results/robot_arm.csv --wall 3600
        # summarise a finished (possibly resumed) run instead: --wall gives its total seconds
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import platform
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "benchmarks" / "results" / "robot_arm_curve.md"


def _example():
    spec = importlib.util.spec_from_file_location("robot_arm", ROOT / "examples" / "robot_arm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def summarise(table: pd.DataFrame, wall: float, target_se: float, command: str) -> str:
    import pymc as pm

    table = table.sort_values("h")
    shown = table[["h", "dim", "log_z_thermodynamic", "se_thermodynamic", "n_groups",
                   "seconds_thermodynamic", "log_z_laplace", "seconds_laplace"]].copy()
    shown["se_met"] = shown["se_thermodynamic"] <= target_se
    lines = [
        "# Robot-arm evidence curve: wall time and standard errors",
        "",
        f"Written by `benchmarks/robot_arm_curve.py` on {datetime.date.today()} "
        f"(Python {platform.python_version()}, PyMC {pm.__version__}, {os.cpu_count()} cores).",
        f"Command: `{command}`.",
        "",
        shown.to_markdown(index=False, floatfmt=".2f"),
        "",
        f"**Total wall time: {wall / 60:.1f} min** for {len(shown)} values of h "
        f"(chaining {table['seconds_thermodynamic'].sum() / 60:.1f} CPU-process min, Laplace "
        f"{table['seconds_laplace'].sum() / 60:.1f}); target SE {target_se} met for "
        f"{int(shown['se_met'].sum())} of {len(shown)}.",
        "",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from-csv", type=Path, help="summarise this finished robot_arm.csv")
    parser.add_argument("--wall", type=float, help="total seconds of that run (with --from-csv)")
    parser.add_argument("--target-se", type=float, default=0.3)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args, example_args = parser.parse_known_args(argv)
    if args.from_csv:
        if args.wall is None:
            parser.error("--from-csv needs --wall (the run's total seconds)")
        table, wall = pd.read_csv(args.from_csv), args.wall
        command = f"examples/robot_arm.py (summarised from {args.from_csv})"
    else:
        example_args += ["--target-se", str(args.target_se)]
        start = time.perf_counter()
        table = _example().main(example_args)
        wall = time.perf_counter() - start
        command = "python examples/robot_arm.py " + " ".join(example_args)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(summarise(table, wall, args.target_se, command))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
