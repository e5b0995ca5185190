"""A model sent as a zip (`register FILE.zip`, the Models page's upload): unpacked into a
staging folder, every member checked before a byte is written.

A zip is refused, whole, when a member's name is absolute or climbs out (`..`), when a member
is a link or a special file, when it holds more than `MAX_MEMBERS` members, or when its
members add up to more than a model folder may (`core_model.artifact.MAX_ARTIFACT_BYTES`,
counted on the bytes actually unpacked, not on what the zip's directory claims). The model
is the zip's root, or its one top-level folder (macOS's `__MACOSX/` aside).
"""

from __future__ import annotations

import shutil
import stat
import zipfile
from pathlib import Path, PurePosixPath

from core_model.artifact import MAX_ARTIFACT_BYTES
from workbench.errors import WorkbenchError
from workbench.messages import N_

MAX_MEMBERS = 256
_IGNORED = ("__MACOSX/", ".DS_Store")


def is_zip(path: Path) -> bool:
    return path.is_file() and zipfile.is_zipfile(path)


def unpack_model_zip(path: Path, destination: Path) -> Path:
    """Unpack the zip `path` into the new folder `destination`; returns the model folder."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = [m for m in archive.infolist() if not _ignored(m.filename)]
            _check(path, members)
            budget = MAX_ARTIFACT_BYTES
            for member in members:
                target = destination.joinpath(*PurePosixPath(member.filename).parts)
                if member.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(member) as src, open(target, "xb") as dst:
                    while block := src.read(1 << 20):
                        budget -= len(block)
                        if budget < 0:
                            raise _too_large(path)
                        dst.write(block)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError) as exc:
        shutil.rmtree(destination, ignore_errors=True)
        raise WorkbenchError(
            N_("{zip} is not a readable zip ({reason})"), zip=path.name, reason=str(exc)[:200]
        ) from None
    except FileExistsError:
        shutil.rmtree(destination, ignore_errors=True)
        raise WorkbenchError(N_("{zip} names a file twice: refused"), zip=path.name) from None
    except WorkbenchError:
        shutil.rmtree(destination, ignore_errors=True)
        raise
    return _model_root(path, destination)


def _too_large(path: Path) -> WorkbenchError:
    return WorkbenchError(
        N_("{zip} unpacks to more than {most} MiB: a model folder is at most that big"),
        zip=path.name,
        most=MAX_ARTIFACT_BYTES >> 20,
    )


def _ignored(name: str) -> bool:
    return name.startswith(_IGNORED[0]) or PurePosixPath(name).name == _IGNORED[1]


def _check(path: Path, members: list[zipfile.ZipInfo]) -> None:
    if len(members) > MAX_MEMBERS:
        raise WorkbenchError(
            N_("{zip} holds more than {most} files: it is not a model folder"),
            zip=path.name,
            most=MAX_MEMBERS,
        )
    if sum(m.file_size for m in members) > MAX_ARTIFACT_BYTES:
        raise _too_large(path)
    for member in members:
        name = member.filename
        parts = PurePosixPath(name).parts
        if name.startswith(("/", "\\")) or "\\" in name or ".." in parts or ":" in name:
            raise WorkbenchError(
                N_("{zip} has a member outside its folder ({name}): refused"),
                zip=path.name,
                name=name[:200],
            )
        kind = stat.S_IFMT(member.external_attr >> 16)  # 0: a zip that records no kind
        if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
            raise WorkbenchError(
                N_("{zip} has a link or special file ({name}): refused"),
                zip=path.name,
                name=name[:200],
            )


def _model_root(path: Path, destination: Path) -> Path:
    """The folder that holds config.json: the zip's root or its one top-level folder."""
    if (destination / "config.json").is_file():
        return destination
    entries = list(destination.iterdir()) if destination.is_dir() else []
    if len(entries) == 1 and (entries[0] / "config.json").is_file():
        return entries[0]
    raise WorkbenchError(
        N_("{zip} holds no model: config.json should be at its root or in its one folder"),
        zip=path.name,
    )
