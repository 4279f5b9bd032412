"""``python -m planner.cli``: the console script without an install."""

from planner.cli.app import main

main()
