"""The ``kvplan`` command line (:mod:`planner.cli.app`); one module per command."""

from __future__ import annotations

from planner.cli.app import app, main

__all__ = ["app", "main"]
