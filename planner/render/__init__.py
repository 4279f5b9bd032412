"""Two views of every result: a rich table on stdout, or ``--json``.

One module per command (``estimate``, ``catalog`` for models and gpus, ``check``, ``diagnose``,
``simulate``, ``verify``) over ``_output``, what they share. Import the one you need
(``from planner.render import estimate``): this package imports none of them, so a command
loads only its own views.
"""
