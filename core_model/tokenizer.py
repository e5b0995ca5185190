"""Subword and word tokenizers that map text to ids with the reserved PAD/BOS/EOS/UNK ids.

Two kinds, one protocol:
- `SentencePieceTokenizer`: subwords learned from the training pairs. Works on unsegmented
  Chinese/Japanese (SentencePiece treats the text as a raw character stream) and on spaced
  languages alike. Trained from an in-memory iterator into bytes: no temp files.
- `WhitespaceTokenizer`: one id per whitespace-separated word, for corpora that are already
  segmented (``我 有 一个 苹果``) or for tests that want fully transparent ids.

Both reserve PAD=0, BOS=1, EOS=2, UNK=3 so that the model config never depends on the tokenizer.

A third kind reads a public checkpoint's vocabulary as it was trained (`MarianTokenizer`:
OPUS-MT models, opened by `core_model.marian`); it keeps that vocabulary's own reserved ids,
which every tokenizer reports as `specials`.

(Over 450 lines on purpose: the three kinds answer one protocol and are loaded by one
`load_tokenizer`, beside the pair of them a model uses and the coverage and alphabet checks
that choose between them; apart, each would import the others back.)
"""

from __future__ import annotations

import base64
import io
import json
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import sentencepiece as spm

from core_model.special_tokens import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    RESERVED,
    SPECIAL_PIECES,
    UNK_ID,
    SpecialIds,
)
from core_model.untrusted_files import read_json

_META_FILE = "tokenizer.json"


class TokenizerError(ValueError):
    """A tokenizer could not be trained or loaded; the message is meant for the user."""


def tokenizer_safe(text: str) -> str:
    """Make any Python string safe for the tokenizers.

    Why: lone surrogates cannot be encoded to UTF-8 (SentencePiece would raise) and control
    characters (NUL, BEL, ...) would otherwise be glued into pieces. Tabs/newlines become spaces.
    """
    if not isinstance(text, str):
        text = str(text)
    text = text.encode("utf-8", "replace").decode("utf-8")
    if any(unicodedata.category(ch) == "Cc" for ch in text):
        text = "".join(" " if unicodedata.category(ch) == "Cc" else ch for ch in text)
    return text


@runtime_checkable
class Tokenizer(Protocol):
    """What the training engine, translator and artifact code need from a tokenizer."""

    kind: str
    specials: SpecialIds  # the reserved ids of this vocabulary (RESERVED for those trained here)

    @property
    def vocab_size(self) -> int: ...

    def encode(self, text: str) -> list[int]:
        """Ids of `text` without BOS/EOS."""
        ...

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids`; PAD/BOS/EOS are dropped."""
        ...

    def pieces(self, text: str) -> list[str]:
        """Surface pieces of `text` aligned 1:1 with `encode(text)` (heatmap labels)."""
        ...

    def ids_to_pieces(self, ids: Sequence[int]) -> list[str]: ...

    def known_characters(self) -> frozenset[str]:
        """Every character this vocabulary writes without <unk> (whitespace aside)."""
        ...

    def save(self, directory: str | Path) -> None: ...


class SentencePieceTokenizer:
    """SentencePiece model held in memory as its serialized proto."""

    kind = "sentencepiece"
    specials = RESERVED

    def __init__(self, model_proto: bytes) -> None:
        self.model_proto = bytes(model_proto)
        self._sp = spm.SentencePieceProcessor(model_proto=self.model_proto)
        ids = [
            self._sp.pad_id(),
            self._sp.bos_id(),
            self._sp.eos_id(),
            self._sp.unk_id(),
        ]
        if ids != [PAD_ID, BOS_ID, EOS_ID, UNK_ID]:
            raise TokenizerError(f"SentencePiece model reserves ids {ids}, expected [0, 1, 2, 3]")

    # -- training -----------------------------------------------------------------------------
    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        vocab_size: int = 8000,
        model_type: str = "unigram",
        character_coverage: float | None = None,
        split_by_whitespace: bool = True,
        normalization: str = "identity",
        max_sentences: int = 2_000_000,
    ) -> SentencePieceTokenizer:
        """Learn subwords from `texts`.

        `vocab_size` is an upper bound: small corpora cannot support large vocabularies, so the
        limit is soft (`hard_vocab_limit=False`) and, if SentencePiece still refuses, we retry with
        the size it suggests. `character_coverage` (None = auto): 1.0 for small corpora, where
        every character is precious (a name's capital letter seen once must not become UNK);
        0.9995 from a million characters on, which keeps (almost) every CJK character while
        dropping noise.
        `normalization` 'identity' keeps text exactly as typed (NFKC would turn a Chinese
        full-width '？' into '?', so a model could never reproduce its own training targets);
        pass 'nmt_nfkc' for SentencePiece's usual normalisation.
        """
        sentences = [t for t in (tokenizer_safe(x).strip() for x in texts) if t]
        if not sentences:
            raise TokenizerError("cannot train a tokenizer on an empty corpus")
        size = max(int(vocab_size), len(SPECIAL_PIECES) + 1)
        if character_coverage is None:
            n_chars = sum(len(t) for t in sentences)
            character_coverage = 1.0 if n_chars < 1_000_000 else 0.9995
        last_error: Exception | None = None
        for _ in range(4):
            buf = io.BytesIO()
            try:
                spm.SentencePieceTrainer.train(
                    sentence_iterator=iter(sentences),
                    model_writer=buf,
                    vocab_size=size,
                    model_type=model_type,
                    character_coverage=character_coverage,
                    split_by_whitespace=split_by_whitespace,
                    normalization_rule_name=normalization,
                    hard_vocab_limit=False,
                    pad_id=PAD_ID,
                    bos_id=BOS_ID,
                    eos_id=EOS_ID,
                    unk_id=UNK_ID,
                    pad_piece=SPECIAL_PIECES[0],
                    bos_piece=SPECIAL_PIECES[1],
                    eos_piece=SPECIAL_PIECES[2],
                    unk_piece=SPECIAL_PIECES[3],
                    input_sentence_size=max_sentences,
                    shuffle_input_sentence=True,
                    num_threads=2,
                    minloglevel=2,
                )
                return cls(buf.getvalue())
            except RuntimeError as exc:  # SentencePiece reports bad sizes as RuntimeError
                last_error = exc
                suggested = _suggested_vocab_size(str(exc))
                if suggested is None or suggested == size:
                    break
                size = suggested
        raise TokenizerError(f"SentencePiece training failed: {last_error}")

    # -- protocol -----------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return int(self._sp.get_piece_size())

    def encode(self, text: str) -> list[int]:
        return list(self._sp.encode(tokenizer_safe(text)))

    def decode(self, ids: Sequence[int]) -> str:
        n = self.vocab_size
        return self._sp.decode([int(i) for i in ids if 0 <= int(i) < n and int(i) > EOS_ID])

    def pieces(self, text: str) -> list[str]:
        return list(self._sp.encode(tokenizer_safe(text), out_type=str))

    def ids_to_pieces(self, ids: Sequence[int]) -> list[str]:
        n = self.vocab_size
        return [self._sp.id_to_piece(int(i)) if 0 <= int(i) < n else "<unk>" for i in ids]

    def known_characters(self) -> frozenset[str]:
        # A character kept by training is a piece of its own, so the pieces' characters are
        # exactly what the model can read and write (normalisation is 'identity').
        sp = self._sp
        pieces = (
            sp.id_to_piece(i)
            for i in range(sp.get_piece_size())
            if not (sp.is_control(i) or sp.is_unknown(i))
        )
        return frozenset("".join(pieces).replace("\u2581", ""))

    def save(self, directory: str | Path) -> None:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        (d / "spm.model").write_bytes(self.model_proto)
        meta = {"kind": self.kind, "vocab_size": self.vocab_size}
        (d / _META_FILE).write_text(json.dumps(meta, indent=2), encoding="utf-8")

    def state(self) -> dict:
        """JSON-able content (for sending a tokenizer between processes without files)."""
        return {
            "kind": self.kind,
            "model_proto": base64.b64encode(self.model_proto).decode(),
        }

    @classmethod
    def from_state(cls, state: dict) -> SentencePieceTokenizer:
        return cls(base64.b64decode(state["model_proto"]))

    @classmethod
    def load(cls, directory: str | Path) -> SentencePieceTokenizer:
        path = Path(directory) / "spm.model"
        try:
            return cls(path.read_bytes())
        except OSError as exc:
            raise TokenizerError(f"missing SentencePiece model {path}") from exc
        except RuntimeError as exc:
            raise TokenizerError(f"corrupt SentencePiece model {path}") from exc


def _suggested_vocab_size(message: str) -> int | None:
    """Parse the size SentencePiece proposes in 'Please set it to a value <= N' style errors."""
    m = re.search(r"value <= (\d+)", message)
    if m:
        return int(m.group(1))
    # "Vocabulary size is smaller than required_chars. 2015 vs 2755.": every character of the
    # corpus (coverage 1.0) needs a piece of its own, plus the special pieces.
    m = re.search(r"required_chars\.\s*\d+ vs (\d+)", message)
    if m:
        return int(m.group(1)) + len(SPECIAL_PIECES) + 1
    return None


class WhitespaceTokenizer:
    """One id per whitespace-separated word; the most frequent words win the vocabulary."""

    kind = "whitespace"
    specials = RESERVED

    def __init__(self, words: Sequence[str]) -> None:
        words = list(words)
        if tuple(words[: len(SPECIAL_PIECES)]) != SPECIAL_PIECES:
            raise TokenizerError("whitespace vocabulary must start with <pad> <s> </s> <unk>")
        self.words = words
        self._index = {w: i for i, w in enumerate(words)}

    @classmethod
    def train(
        cls, texts: Iterable[str], vocab_size: int | None = None, min_freq: int = 1
    ) -> WhitespaceTokenizer:
        """Vocabulary = words seen at least `min_freq` times, most frequent first (ties: first
        seen), capped at `vocab_size` including the 4 specials."""
        counts: Counter[str] = Counter()
        for t in texts:
            counts.update(tokenizer_safe(t).split())
        if not counts:
            raise TokenizerError("cannot train a tokenizer on an empty corpus")
        ranked = [w for w, c in counts.most_common() if c >= min_freq and w not in SPECIAL_PIECES]
        if vocab_size is not None:
            ranked = ranked[: max(0, int(vocab_size) - len(SPECIAL_PIECES))]
        return cls(list(SPECIAL_PIECES) + ranked)

    @property
    def vocab_size(self) -> int:
        return len(self.words)

    def encode(self, text: str) -> list[int]:
        return [self._index.get(w, UNK_ID) for w in tokenizer_safe(text).split()]

    def decode(self, ids: Sequence[int]) -> str:
        n = len(self.words)
        out = []
        for i in ids:
            i = int(i)
            if i in (PAD_ID, BOS_ID, EOS_ID):
                continue
            out.append(self.words[i] if 0 <= i < n and i != UNK_ID else "⁇")
        return " ".join(out)

    def pieces(self, text: str) -> list[str]:
        return tokenizer_safe(text).split()

    def ids_to_pieces(self, ids: Sequence[int]) -> list[str]:
        n = len(self.words)
        return [self.words[int(i)] if 0 <= int(i) < n else "<unk>" for i in ids]

    def known_characters(self) -> frozenset[str]:
        # (a word-level vocabulary: an unknown word of known letters is still <unk>)
        return frozenset("".join(self.words[len(SPECIAL_PIECES) :]))

    def save(self, directory: str | Path) -> None:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        (d / "vocab.txt").write_text("\n".join(self.words) + "\n", encoding="utf-8")
        meta = {"kind": self.kind, "vocab_size": self.vocab_size}
        (d / _META_FILE).write_text(json.dumps(meta, indent=2), encoding="utf-8")

    def state(self) -> dict:
        """JSON-able content (for sending a tokenizer between processes without files)."""
        return {"kind": self.kind, "words": self.words}

    @classmethod
    def from_state(cls, state: dict) -> WhitespaceTokenizer:
        return cls(state["words"])

    @classmethod
    def load(cls, directory: str | Path) -> WhitespaceTokenizer:
        path = Path(directory) / "vocab.txt"
        try:
            words = path.read_text(encoding="utf-8").split("\n")
        except (OSError, UnicodeDecodeError) as exc:
            raise TokenizerError(f"missing or unreadable vocabulary {path}") from exc
        if words and words[-1] == "":
            words.pop()
        return cls(words)


class MarianTokenizer:
    """One side of a Marian (OPUS-MT) checkpoint's vocabulary, mapped as transformers'
    `MarianTokenizer` maps it: pieces from this side's SentencePiece model (source.spm or
    target.spm), ids from the vocabulary both sides share (vocab.json); a piece the
    vocabulary lacks is <unk>. A multilingual model's source starts with the token of the
    target language (`prefix`, e.g. >>cmn_Hans<<). Its reserved ids are the vocabulary's own
    (</s>, <unk>, <pad>; the decoder starts from <pad>)."""

    kind = "marian"

    def __init__(self, model_proto: bytes, vocab: dict[str, int], prefix: str | None = None):
        if not isinstance(vocab, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
            for k, v in vocab.items()
        ):
            raise TokenizerError("vocab.json must map pieces to integer ids")
        if sorted(vocab.values()) != list(range(len(vocab))):
            raise TokenizerError("vocab.json must number its pieces 0, 1, 2, ... without gaps")
        missing = [p for p in ("<pad>", "</s>", "<unk>") if p not in vocab]
        if missing:
            raise TokenizerError(f"vocab.json has no {', '.join(missing)}")
        if prefix is not None and prefix not in language_tokens(vocab):
            raise TokenizerError(f"{prefix!r} is not a target-language token of this vocabulary")
        try:
            self._sp = spm.SentencePieceProcessor(model_proto=bytes(model_proto))
        except (RuntimeError, TypeError) as exc:
            raise TokenizerError(f"corrupt SentencePiece model ({exc})") from exc
        self.model_proto = bytes(model_proto)
        self.vocab = dict(vocab)
        self.prefix = prefix
        self._pieces = sorted(vocab, key=vocab.__getitem__)  # by id
        pad = vocab["<pad>"]
        self.specials = SpecialIds(pad=pad, bos=pad, eos=vocab["</s>"], unk=vocab["<unk>"])

    @property
    def vocab_size(self) -> int:
        return len(self._pieces)

    def pieces(self, text: str) -> list[str]:
        return ([self.prefix] if self.prefix else []) + list(
            self._sp.encode(tokenizer_safe(text), out_type=str)
        )

    def encode(self, text: str) -> list[int]:
        unk = self.specials.unk
        return [self.vocab.get(piece, unk) for piece in self.pieces(text)]

    def ids_to_pieces(self, ids: Sequence[int]) -> list[str]:
        n = self.vocab_size
        return [self._pieces[int(i)] if 0 <= int(i) < n else "<unk>" for i in ids]

    def decode(self, ids: Sequence[int]) -> str:
        """Pieces decoded by this side's SentencePiece model (PAD and EOS dropped; <unk> is
        ' ⁇ ', as SentencePiece writes it)."""
        dropped = {self.specials.pad, self.specials.eos}
        kept = [int(i) for i in ids if int(i) not in dropped]
        return self._sp.decode_pieces(self.ids_to_pieces(kept))

    def known_characters(self) -> frozenset[str]:
        # The pieces this side's SentencePiece model can produce that have an id.
        sp = self._sp
        pieces = (
            sp.id_to_piece(i)
            for i in range(sp.get_piece_size())
            if not (sp.is_control(i) or sp.is_unknown(i)) and sp.id_to_piece(i) in self.vocab
        )
        return frozenset("".join(pieces).replace("\u2581", ""))

    def save(self, directory: str | Path) -> None:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        (d / "spm.model").write_bytes(self.model_proto)
        (d / "vocab.json").write_text(json.dumps(self.vocab, ensure_ascii=False), encoding="utf-8")
        meta = {"kind": self.kind, "vocab_size": self.vocab_size, "prefix": self.prefix}
        (d / _META_FILE).write_text(json.dumps(meta, indent=2), encoding="utf-8")

    def state(self) -> dict:
        """JSON-able content (for sending a tokenizer between processes without files)."""
        return {
            "kind": self.kind,
            "model_proto": base64.b64encode(self.model_proto).decode(),
            "vocab": self.vocab,
            "prefix": self.prefix,
        }

    @classmethod
    def from_state(cls, state: dict) -> MarianTokenizer:
        return cls(base64.b64decode(state["model_proto"]), state["vocab"], state["prefix"])

    @classmethod
    def load(cls, directory: str | Path) -> MarianTokenizer:
        d = Path(directory)
        try:
            meta = read_json(d / _META_FILE)
            vocab = read_json(d / "vocab.json")
            model_proto = (d / "spm.model").read_bytes()
        except (OSError, ValueError) as exc:
            raise TokenizerError(f"missing or unreadable Marian vocabulary in {d}") from exc
        return cls(model_proto, vocab, meta.get("prefix") if isinstance(meta, dict) else None)


def language_tokens(vocab: dict[str, int]) -> list[str]:
    """A multilingual Marian vocabulary's target-language tokens (>>fra<<, >>cmn_Hans<<)."""
    return sorted(p for p in vocab if p.startswith(">>") and p.endswith("<<") and len(p) > 4)


_KINDS: dict[str, type] = {
    "sentencepiece": SentencePieceTokenizer,
    "whitespace": WhitespaceTokenizer,
    "marian": MarianTokenizer,
}


def load_tokenizer(directory: str | Path) -> Tokenizer:
    """Load whichever tokenizer kind `directory` holds (read from its tokenizer.json)."""
    meta_path = Path(directory) / _META_FILE
    try:
        meta = read_json(meta_path)
        kind = meta["kind"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise TokenizerError(f"missing or invalid {meta_path}") from exc
    if kind not in _KINDS:
        raise TokenizerError(f"unknown tokenizer kind {kind!r} in {meta_path}")
    return _KINDS[kind].load(directory)


@dataclass
class TokenizerPair:
    """Source and target tokenizers; `shared` means one joint vocabulary (src is tgt)."""

    src: Tokenizer
    tgt: Tokenizer
    shared: bool = False

    @property
    def kind(self) -> str:
        return self.src.kind

    @property
    def specials(self) -> SpecialIds:
        """The reserved ids the model reads and writes (both sides share them)."""
        return self.tgt.specials

    def save(self, directory: str | Path) -> None:
        """Layout: tokenizer.json {kind, shared} + joint/ (shared) or src/ and tgt/."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        if self.shared:
            self.src.save(d / "joint")
        else:
            self.src.save(d / "src")
            self.tgt.save(d / "tgt")
        meta = {
            "kind": self.kind,
            "shared": self.shared,
            "src_vocab_size": self.src.vocab_size,
            "tgt_vocab_size": self.tgt.vocab_size,
        }
        (d / _META_FILE).write_text(json.dumps(meta, indent=2), encoding="utf-8")

    def to_bytes(self) -> bytes:
        """Serialize both tokenizers (DDP: rank 0 trains them, the other ranks receive them)."""
        data = {"shared": self.shared, "src": self.src.state()}  # type: ignore[attr-defined]
        if not self.shared:
            data["tgt"] = self.tgt.state()  # type: ignore[attr-defined]
        return json.dumps(data).encode("utf-8")

    @classmethod
    def from_bytes(cls, blob: bytes) -> TokenizerPair:
        data = json.loads(blob.decode("utf-8"))
        src = _KINDS[data["src"]["kind"]].from_state(data["src"])
        if data["shared"]:
            return cls(src, src, True)
        return cls(src, _KINDS[data["tgt"]["kind"]].from_state(data["tgt"]), False)

    @classmethod
    def load(cls, directory: str | Path) -> TokenizerPair:
        d = Path(directory)
        try:
            meta = read_json(d / _META_FILE)
            shared = bool(meta["shared"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise TokenizerError(f"missing or invalid {d / _META_FILE}") from exc
        if shared:
            joint = load_tokenizer(d / "joint")
            return cls(joint, joint, True)
        return cls(load_tokenizer(d / "src"), load_tokenizer(d / "tgt"), False)


def character_coverage(tokenizer: Tokenizer, char_counts: Counter[str]) -> float:
    """The share of the counted characters (``Counter`` of a text's characters; whitespace is
    skipped) that ``tokenizer`` knows: 1.0 for a text it reads without <unk>, and for no text.
    Whether a trained model can be continued on new text (its vocabulary is fixed) hinges on
    it."""
    known = tokenizer.known_characters()
    total = seen = 0
    for ch, n in char_counts.items():
        if ch.isspace():
            continue
        total += n
        seen += n if ch in known else 0
    return seen / total if total else 1.0


def unknown_characters(tokenizer: Tokenizer, char_counts: Counter[str]) -> list[str]:
    """The counted characters (whitespace aside) that ``tokenizer`` cannot write, most frequent
    first: a target holding one of them can never be reproduced by a model with this
    vocabulary (it writes <unk>, shown as ⁇, in its place)."""
    known = tokenizer.known_characters()
    return [ch for ch, _ in char_counts.most_common() if not ch.isspace() and ch not in known]


def shares_alphabet(src_texts: Sequence[str], tgt_texts: Sequence[str], sample: int = 2000) -> bool:
    """Whether both sides write with mostly the same letters (de/en yes, zh/en no): Jaccard
    overlap of their letter sets of at least one half."""
    a = {ch for t in src_texts[:sample] for ch in t if ch.isalpha()}
    b = {ch for t in tgt_texts[:sample] for ch in t if ch.isalpha()}
    return len(a & b) / max(1, len(a | b)) >= 0.5


def train_tokenizers(
    src_texts: Sequence[str],
    tgt_texts: Sequence[str],
    kind: str = "sentencepiece",
    vocab_size: int = 8000,
    joint: bool | None = None,
    **kwargs: object,
) -> TokenizerPair:
    """Train the tokenizers of a language pair.

    `joint=None` decides from the data: languages that share most of their alphabet (de/en)
    get one joint vocabulary (=> tied embeddings, fewer parameters); different scripts (zh/en)
    get one vocabulary per side so neither side's pieces crowd out the other's.
    """
    src_texts, tgt_texts = list(src_texts), list(tgt_texts)
    if joint is None:
        joint = shares_alphabet(src_texts, tgt_texts)
    if kind == "sentencepiece":
        train = SentencePieceTokenizer.train
    elif kind == "whitespace":
        train = WhitespaceTokenizer.train
    else:
        raise TokenizerError(
            f"unknown tokenizer kind {kind!r} (use 'sentencepiece' or 'whitespace')"
        )
    if joint:
        tok = train(src_texts + tgt_texts, vocab_size=vocab_size, **kwargs)  # type: ignore[arg-type]
        return TokenizerPair(tok, tok, True)
    src = train(src_texts, vocab_size=vocab_size, **kwargs)  # type: ignore[arg-type]
    tgt = train(tgt_texts, vocab_size=vocab_size, **kwargs)  # type: ignore[arg-type]
    return TokenizerPair(src, tgt, False)
