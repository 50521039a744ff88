"""Shared pytest set-up: the `gpu` marker and the location of the built package."""

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs an sm_90 GPU; skipped (and reported) elsewhere")
