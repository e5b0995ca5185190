"""``storage.record_of``: a row's same-named columns into a service's record, and nothing else."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from db.tables import Corpus
from workbench.storage import record_of


@dataclass
class _Named:
    name: str
    src_lang: str
    pairs: int


@dataclass
class _Described:
    name: str
    metadata: object


def test_a_record_takes_the_rows_columns_and_what_is_given() -> None:
    row = Corpus(name="news", src_lang="de", tgt_lang="en")
    assert record_of(_Named, row, pairs=3) == _Named("news", "de", 3)


def test_a_field_without_a_column_is_an_error_not_a_guess() -> None:
    row = Corpus(name="news", src_lang="de", tgt_lang="en")
    with pytest.raises(TypeError, match="_Named: no column for pairs"):
        record_of(_Named, row)  # a new field that nobody fills
    # every ORM row has a ``metadata`` attribute (its tables' MetaData), but no such column
    with pytest.raises(TypeError, match="_Described: no column for metadata"):
        record_of(_Described, row)
