"""Shared pytest configuration: ``--runslow`` turns on the tests marked ``slow``."""

from __future__ import annotations

import os

import pytest

# Worker processes (process pools, Dask) compile into the shared ~/.pytensor cache under one
# lock; on a loaded 2-core machine a wait can pass PyTensor's default 120 s and fail a test.
# Set before PyTensor is imported; inherited by the workers.
os.environ["PYTENSOR_FLAGS"] = ",".join(
    flag for flag in (os.environ.get("PYTENSOR_FLAGS", ""), "compile__timeout=1200") if flag
)


def pytest_addoption(parser):
    parser.addoption(
        "--runslow",
        action="store_true",
        default=False,
        help="also run tests marked slow (long accuracy studies, full example runs)",
    )


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow"):
        return
    skip_slow = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip_slow)
