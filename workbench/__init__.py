"""The application layer: corpus operations, training jobs and worker, model registry,
translation/evaluation services and the CLI. The UI calls only these functions; each opens
its own short database session and returns plain dataclasses or pandas DataFrames."""

from workbench.errors import WorkbenchError

__all__ = ["WorkbenchError"]
