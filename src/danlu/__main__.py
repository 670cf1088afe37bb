"""``python -m danlu``: the ``danlu`` command line, for a machine where the console script is not
on the PATH (e.g. a virtual environment that is not activated)."""

from __future__ import annotations

from danlu.cli.main import app

if __name__ == "__main__":
    app(prog_name="danlu")
