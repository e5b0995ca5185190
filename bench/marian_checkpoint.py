"""A Marian (OPUS-MT style) checkpoint made on the spot, for the tests and the benchmark of
`core_model.marian`: SentencePiece models trained here, a vocab.json built from them as
OPUS-MT's converter builds it (</s> 0, <unk> 1, the pieces, <pad> last), and a **random**
`transformers.MarianMTModel` saved next to them — optionally trained for a few seconds on a
toy task (`train_steps`), so that it ends its outputs at varied lengths as a real model does
(a random one never emits </s>, or always at once). Nothing is downloaded. `transformers`
is a test-only dependency: the workbench itself never imports it.
"""

from __future__ import annotations

import io
import json
import random
from pathlib import Path
from typing import Any

import sentencepiece as spm
import torch

from core_model.marian import model_config
from core_model.transformer import ModelConfig

# Words the SentencePiece models learn from: Chinese, English, accented Latin.
_SOURCE_TEXT = (
    "我 你 他 她 们 的 是 不 在 有 这 那 一 个 很 好 喝 茶 咖啡 书 猫 狗 家 门 天 早上 明天 "
    "学校 朋友 喜欢 中国 北京 上海 东西 吃饭 水 电脑 工作 "
    "café crème déjà vu naïve façade über Straße Mädchen señor niño año coração "
    "ça été élève Ærø smørrebrød Łódź Zürich garçon jalapeño"
)
_TARGET_TEXT = (
    "i you he she we the a is not in have this that one very good drink tea coffee book "
    "cat dog home door day morning tomorrow school friend like china work water eat "
    "café crème déjà vu naïve façade über straße mädchen señor niño"
)
_SOURCE_WORDS, _TARGET_WORDS = _SOURCE_TEXT.split(), _TARGET_TEXT.split()
# Characters neither SentencePiece model has seen: they become <unk>.
_UNSEEN = ("😀", "Ω", "Ж", "ß̈", "龘", "☃", "ŋ", "ǂ", "€", "𝔘")
LANGUAGE_TOKENS = (">>cmn_Hans<<", ">>fra<<", ">>deu<<")


def _sentences(words: tuple[str, ...] | list[str], n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        picked = rng.sample(list(words), rng.randint(2, 9))
        glue = "" if all(len(w) <= 2 and not w.isascii() for w in picked) else " "
        out.append(glue.join(picked) + rng.choice(["", ".", "?", "!", "。", "，", " ..."]))
    return out


def toy_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    """Source sentences with "translations" as long as they are (a task to learn lengths)."""
    rng = random.Random(seed)
    pairs = []
    for source in _sentences(_SOURCE_WORDS, n, seed):
        length = max(1, len(source.split()) if " " in source else len(source) // 2)
        pairs.append((source, " ".join(rng.choice(_TARGET_WORDS) for _ in range(length)) + "."))
    return pairs


def sample_sentences(n: int = 200, seed: int = 1) -> list[str]:
    """`n` source sentences: Chinese, accents, and every fifth with unseen characters."""
    rng = random.Random(seed)
    out = _sentences(_SOURCE_WORDS, n, seed)
    for i in range(0, n, 5):
        out[i] = f"{out[i]} {rng.choice(_UNSEEN)}{rng.choice(_UNSEEN)} 1234"
    return out


def _train_spm(texts: list[str], vocab_size: int) -> bytes:
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=buffer,
        vocab_size=vocab_size,
        model_type="unigram",
        character_coverage=1.0,
        hard_vocab_limit=False,
        minloglevel=2,
        num_threads=1,
    )
    return buffer.getvalue()


def _vocabulary(protos: list[bytes], size: int | None, multilingual: bool, drop_every: int) -> dict:
    """vocab.json as OPUS-MT's converter writes it: </s>, <unk>, (language tokens), the
    pieces of both models (every `drop_every`-th left out, so that some pieces SentencePiece
    produces are unknown to the vocabulary), filler pieces up to `size` in all, <pad> last."""
    pieces: list[str] = ["</s>", "<unk>"]
    if multilingual:
        pieces += LANGUAGE_TOKENS
    seen = set(pieces)
    count = 0
    for proto in protos:
        sp = spm.SentencePieceProcessor(model_proto=proto)
        for i in range(sp.get_piece_size()):
            piece = sp.id_to_piece(i)
            if sp.is_control(i) or sp.is_unknown(i) or piece in seen:
                continue
            count += 1
            if drop_every and count % drop_every == 0:
                continue
            seen.add(piece)
            pieces.append(piece)
    pieces += [f"<filler{i}>" for i in range(max(0, (size or 0) - len(pieces) - 1))]
    pieces.append("<pad>")
    return {p: i for i, p in enumerate(pieces)}


# An OPUS-MT model's size in `save_random_marian`'s terms: the size the recipe's pretrained
# branch and the benchmarks (import time, fine-tuning speed) are about.
OPUS_MT_SIZE = {
    "d_model": 512,
    "layers": 6,
    "heads": 8,
    "ffn": 2048,
    "vocab_size": 58_101,  # opus-mt-de-en's
    "max_positions": 512,
}


def _config_json(
    *,
    d_model: int,
    layers: int,
    heads: int,
    ffn: int,
    vocab_size: int,
    max_positions: int,
    activation: str = "swish",
) -> dict[str, Any]:
    """The fields of a Marian config.json (`transformers.MarianConfig`'s keywords) that say a
    model's size; <pad> is the vocabulary's last entry, as in OPUS-MT's."""
    return {
        "d_model": d_model,
        "encoder_layers": layers,
        "decoder_layers": layers,
        "encoder_attention_heads": heads,
        "decoder_attention_heads": heads,
        "encoder_ffn_dim": ffn,
        "decoder_ffn_dim": ffn,
        "vocab_size": vocab_size,
        "pad_token_id": vocab_size - 1,
        "max_position_embeddings": max_positions,
        "activation_function": activation,
        "scale_embedding": True,
    }


def opus_mt_config() -> ModelConfig:
    """Our ModelConfig of an OPUS-MT model (6+6 layers, d_model 512, 8 heads, FFN 2,048,
    opus-mt-de-en's 58k vocabulary), as `core_model.marian` opens its config.json."""
    return model_config(_config_json(**OPUS_MT_SIZE), unk_id=1)


def save_random_marian(
    folder: Path,
    *,
    d_model: int = 32,
    layers: int = 2,
    heads: int = 4,
    ffn: int = 64,
    spm_size: int = 120,
    vocab_size: int | None = None,
    multilingual: bool = False,
    activation: str = "swish",
    seed: int = 0,
    max_positions: int = 128,
    train_steps: int = 0,
) -> Path:
    """A random MarianMTModel with its tokenizer files in `folder` (created), trained for
    `train_steps` steps on `toy_pairs`; returns the folder. `vocab_size`: the vocabulary's
    size, made up with filler pieces (OPUS-MT's are about 58k: the output layer's cost)."""
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    source = _train_spm(_sentences(_SOURCE_WORDS, 400, seed + 10), spm_size)
    target = _train_spm(_sentences(_TARGET_WORDS, 400, seed + 20), spm_size)
    vocab = _vocabulary([source, target], vocab_size, multilingual, drop_every=13)
    (folder / "source.spm").write_bytes(source)
    (folder / "target.spm").write_bytes(target)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"source_lang": "zh", "target_lang": "en", "model_max_length": 512}),
        encoding="utf-8",
    )
    pad = len(vocab) - 1
    size = _config_json(
        d_model=d_model,
        layers=layers,
        heads=heads,
        ffn=ffn,
        vocab_size=len(vocab),
        max_positions=max_positions,
        activation=activation,
    )
    config = MarianConfig(
        **size,
        eos_token_id=0,
        decoder_start_token_id=pad,
        forced_eos_token_id=None,
    )
    torch.manual_seed(seed)
    model = MarianMTModel(config).eval()
    with torch.no_grad():  # away from the init's zeros and ones, so every part is tested
        model.final_logits_bias.normal_(0.0, 0.5)
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.3, 0.3)
            elif isinstance(module, torch.nn.Linear) and module.bias is not None:
                module.bias.normal_(0.0, 0.1)
    if train_steps:
        _train(model, MarianTokenizer.from_pretrained(str(folder)), train_steps, seed)
    with torch.no_grad():  # <pad> starts the decoder: a zero vector, as OPUS-MT's converter
        model.model.shared.weight[pad].zero_()  # wrote it (the tied output layer moved it)
    model.save_pretrained(folder)
    return folder


def _train(model, tokenizer, steps: int, seed: int) -> None:
    pairs = toy_pairs(256, seed + 30)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    rng = random.Random(seed)
    model.train()
    for _ in range(steps):
        batch = rng.sample(pairs, 16)
        inputs = tokenizer(
            [s for s, _ in batch],
            text_target=[t for _, t in batch],
            padding=True,
            return_tensors="pt",
        )
        inputs["labels"][inputs["labels"] == model.config.pad_token_id] = -100
        model(**inputs).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
