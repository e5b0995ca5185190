"""The application layer: corpora and pairs, imports and exports, training runs and the worker,
the model registry, translation, inspection and evaluation, the CLI, and the settings
(environment and paths). The UI and the CLI call only these functions; each service opens its
own short database session (``storage.session_scope``) and returns plain dataclasses or
DataFrames.
``docs/ARCHITECTURE.md`` says which module holds which concept."""

from workbench.errors import WorkbenchError

__all__ = ["WorkbenchError"]
