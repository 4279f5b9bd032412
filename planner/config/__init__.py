"""What kvplan's ``VllmConfig`` is made of: every serve setting, declared once.

:mod:`planner.config.fields` holds the declarations; the command-line options of every command,
the plans-file schema (and its JSON Schema), diagnose's boot-log reader, ``--compare`` axes and
the emitted engine commands are views of them.
"""
