"""The reserved token ids, defined once: every tokenizer trained here maps them to the same
pieces and the model config never depends on which tokenizer was used. A public checkpoint's
vocabulary keeps its own ids (Marian: </s> 0, <unk> 1, <pad> last, decoding starts from PAD):
its tokenizer says which they are (`SpecialIds`), and its model config agrees."""

from __future__ import annotations

from typing import NamedTuple

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
SPECIAL_PIECES = ("<pad>", "<s>", "</s>", "<unk>")  # indexed by the ids above


class SpecialIds(NamedTuple):
    """A vocabulary's reserved ids; `bos` is the decoder's start token (Marian: PAD)."""

    pad: int = PAD_ID
    bos: int = BOS_ID
    eos: int = EOS_ID
    unk: int = UNK_ID


RESERVED = SpecialIds()  # the vocabularies trained here
