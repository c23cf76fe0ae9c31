"""Progress bars: tqdm made safe under fork, or nothing when ``progressbar=False``."""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["progress_bar", "TemperingBar"]


@functools.cache
def _quiet_tqdm():
    """tqdm without its monitor thread (a running thread makes forking workers unsafe)."""
    from tqdm.auto import tqdm

    return type("QuietTqdm", (tqdm,), {"monitor_interval": 0})


def progress_bar(enabled: bool, **options):
    """A tqdm bar (``options`` are tqdm's) if ``enabled``, else None."""
    return _quiet_tqdm()(**options) if enabled else None


class TemperingBar:
    """PyMC-style progress of a tempered run: λ from 0 to 1, with the running log evidence;
    one bar per round of groups."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.bar = None
        self.round = 1

    def new_round(self, number: int | str) -> None:
        """Start the bar of round ``number`` (or of a round described by a string)."""
        self.close()
        self.round = number

    def update(self, lam: float, stages: list) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            label = f"round {self.round}" if isinstance(self.round, int) else self.round
            self.bar = progress_bar(
                True, total=1.0, desc=f"Tempering ({label})",
                bar_format="{desc}: {percentage:3.0f}%|{bar}| {postfix} [{elapsed}]")
        self.bar.update(lam - self.bar.n)
        log_z = float(np.mean([sum(s.log_ratio.mean() for s in stages)]))
        self.bar.set_postfix_str(f"stage {len(stages)}, λ={lam:.4g}, log Z≈{log_z:.2f}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
