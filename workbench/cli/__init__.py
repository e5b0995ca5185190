"""The command line, ``python -m workbench <command>``: ``dispatch`` builds the parser from
the commands of each group module and runs one; ``common`` is what they share."""

from workbench.cli.dispatch import main

__all__ = ["main"]
