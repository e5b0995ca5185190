"""Proof that a Marian checkpoint opened by core_model.marian is the same model as in
transformers: the same token ids as `MarianTokenizer`, the same logits as `MarianMTModel`,
and the same greedy and beam-4 outputs as its `generate()`. The checkpoint is a tiny one the
test builds (bench/marian_checkpoint.py): nothing is downloaded. Bad folders are refused with
one line, before anything is written."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

from bench.marian_checkpoint import (
    LANGUAGE_TOKENS,
    sample_sentences,
    save_random_marian,
    toy_pairs,
)
from core_model.artifact import load_model
from core_model.batching import encode_pairs, encode_source, pad_sources
from core_model.decoding import beam_search, greedy_decode
from core_model.marian import (
    MarianError,
    convert_marian,
    is_marian,
    read_marian,
    target_tokens,
)
from core_model.metrics import score
from core_model.model_card import card_summary
from core_model.training import TrainConfig, train
from core_model.training import calibration as calibration_module
from core_model.training.calibration import Calibration
from core_model.training.recipe import PRETRAINED_PEAK_LR
from core_model.training.validation import evaluate_loss
from core_model.transformer import ModelConfig
from core_model.translator import translate

MAX_NEW_TOKENS = 12


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny MarianMTModel trained for a few seconds, so that it ends at varied lengths."""
    folder = tmp_path_factory.mktemp("hf") / "opus-mt-zh-en"
    return save_random_marian(folder, train_steps=120)


@pytest.fixture(scope="module")
def theirs(checkpoint: Path):
    model = transformers.MarianMTModel.from_pretrained(str(checkpoint)).eval()
    return model, transformers.MarianTokenizer.from_pretrained(str(checkpoint))


def _batch(opened, sentences: list[str]) -> torch.Tensor:
    ids = [encode_source(opened.tokenizers, s, 10_000) for s in sentences]
    return pad_sources(ids, opened.model.cfg.pad_id)  # [B, S]


def test_token_ids_are_marian_tokenizers(checkpoint: Path, theirs) -> None:
    _, tokenizer = theirs
    opened = read_marian(checkpoint)
    sentences = sample_sentences(200)
    ours = [encode_source(opened.tokenizers, s, 10_000) for s in sentences]
    assert ours == [tokenizer(s)["input_ids"] for s in sentences]
    unk, eos = opened.tokenizers.specials.unk, opened.tokenizers.specials.eos
    assert all(ids[-1] == eos for ids in ours)  # </s> appended
    assert sum(unk in ids for ids in ours) >= 40  # unknown characters and pieces -> <unk>
    assert any("咖啡" in s for s in sentences) and any("é" in s for s in sentences)
    # target side: target.spm pieces, ids from the same vocabulary, and back to text
    targets = [t for _, t in toy_pairs(50, 3)]
    target_ids = [[*opened.tokenizers.tgt.encode(t), eos] for t in targets]
    assert target_ids == [tokenizer(text_target=t)["input_ids"] for t in targets]
    readable = [ids for ids in target_ids if unk not in ids]
    assert readable
    for ids in readable:
        assert opened.tokenizers.tgt.decode(ids) == tokenizer.decode(ids, skip_special_tokens=True)


def test_a_multilingual_model_needs_its_target_language_token(tmp_path: Path) -> None:
    folder = save_random_marian(
        tmp_path / "opus-mt-en-mul", d_model=16, layers=1, multilingual=True
    )
    assert target_tokens(folder) == sorted(LANGUAGE_TOKENS)
    with pytest.raises(MarianError, match=r"choose one of >>cmn_Hans<<, >>deu<<, >>fra<<"):
        read_marian(folder)
    with pytest.raises(MarianError, match=r"'>>xx<<' is not a target-language token"):
        read_marian(folder, ">>xx<<")
    opened = read_marian(folder, ">>fra<<")
    tokenizer = transformers.MarianTokenizer.from_pretrained(str(folder))
    for s in sample_sentences(30, seed=4):
        ours = encode_source(opened.tokenizers, s, 10_000)
        assert ours == tokenizer(f">>fra<< {s}")["input_ids"]
        assert opened.tokenizers.src.pieces(s)[0] == ">>fra<<"


def test_logits_equal_marians_on_a_padded_batch(checkpoint: Path, theirs) -> None:
    model, _ = theirs
    opened = read_marian(checkpoint)
    cfg = opened.model.cfg
    src = _batch(opened, sample_sentences(8, seed=5))  # sentences of different lengths: padded
    assert (src == cfg.pad_id).any()
    torch.manual_seed(0)
    tgt = torch.randint(2, cfg.tgt_vocab_size - 1, (8, 9))
    tgt[:, 0] = cfg.pad_id  # Marian's decoder starts from <pad>
    tgt[3, 5:] = cfg.pad_id  # a padded target row
    with torch.no_grad():
        expected = model(
            input_ids=src, attention_mask=(src != cfg.pad_id).long(), decoder_input_ids=tgt
        ).logits
        ours = opened.model(src, tgt)
    real = torch.ones_like(tgt, dtype=torch.bool)
    real[3, 5:] = False  # padded positions' logits are never read
    delta = (ours - expected).abs()[real].max().item()
    assert delta < 1e-4, delta


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_greedy_and_beam_outputs_equal_generate(
    checkpoint: Path,
    theirs,
    alpha: float,
) -> None:
    """Same settings on both sides: at most MAX_NEW_TOKENS tokens, <pad> never produced
    (transformers: bad_words_ids; ours never outputs the start token), beam 4 with
    score = log P / |Y|^alpha (transformers' length_penalty, our 'power' penalty)."""
    model, _ = theirs
    opened = read_marian(checkpoint)
    cfg = opened.model.cfg
    src = _batch(opened, sample_sentences(200))

    def generate(beams: int) -> list[list[int]]:
        with torch.no_grad():
            out = model.generate(
                input_ids=src,
                attention_mask=(src != cfg.pad_id).long(),
                num_beams=beams,
                do_sample=False,
                length_penalty=alpha,
                early_stopping=False,
                max_new_tokens=MAX_NEW_TOKENS,
                bad_words_ids=[[cfg.pad_id]],
            )
        return [[t for t in row[1:] if t != cfg.pad_id] for row in out.tolist()]

    def ours(results) -> list[list[int]]:
        return [r.tokens + ([cfg.eos_id] if r.ended else []) for r in results]

    greedy = greedy_decode(opened.model, src, max_len_a=0.0, max_len_b=MAX_NEW_TOKENS)
    beam = beam_search(
        opened.model,
        src,
        beam_size=4,
        length_penalty_alpha=alpha,
        length_penalty_kind="power",
        max_len_a=0.0,
        max_len_b=MAX_NEW_TOKENS,
    )
    assert ours(greedy) == generate(1)
    assert ours(beam) == generate(4)
    lengths = {len(r.tokens) for r in beam if r.ended}
    assert len(lengths) >= 3  # outputs end at varied lengths, with </s>


def test_a_converted_folder_is_a_model_of_ours(checkpoint: Path, tmp_path: Path) -> None:
    opened = convert_marian(checkpoint, tmp_path / "ours")
    loaded = load_model(tmp_path / "ours")
    assert loaded.config["pretrained"]["format"] == "marian"
    assert (loaded.config["pretrained"]["src_lang"], loaded.config["pretrained"]["tgt_lang"]) == (
        "zh",
        "en",
    )
    src = _batch(opened, sample_sentences(5))
    tgt = torch.full((5, 1), opened.model.cfg.pad_id)
    with torch.no_grad():
        assert torch.equal(loaded.model(src, tgt), opened.model(src, tgt))
    [result] = translate(loaded, ["我喜欢喝茶。"], beam=4)
    assert result.out_ids and result.src_pieces[-1] == "</s>"


def test_pytorch_model_bin_is_read_with_weights_only(checkpoint: Path, tmp_path: Path) -> None:
    folder = tmp_path / "bin"
    shutil.copytree(checkpoint, folder)
    state = load_file(str(folder / "model.safetensors"))
    (folder / "model.safetensors").unlink()
    torch.save(state, folder / "pytorch_model.bin")
    src = _batch(read_marian(checkpoint), sample_sentences(3))
    tgt = torch.full((3, 1), read_marian(checkpoint).model.cfg.pad_id)
    with torch.no_grad():
        assert torch.equal(
            read_marian(folder).model(src, tgt), read_marian(checkpoint).model(src, tgt)
        )

    torch.save({"payload": _Payload()}, folder / "pytorch_model.bin")
    with pytest.raises(MarianError, match=r"pytorch_model.bin cannot be read safely"):
        read_marian(folder)


class _Payload:
    """What a malicious pickle carries: a call made when it is loaded (a harmless one)."""

    def __reduce__(self) -> tuple:
        return (print, ("a pickle ran code",))


def _broken(checkpoint: Path, tmp_path: Path, how: str) -> Path:
    folder = tmp_path / how
    shutil.copytree(checkpoint, folder)
    config = json.loads((folder / "config.json").read_text())
    if how == "bert":
        config["model_type"] = "bert"
    elif how == "no_vocab":
        (folder / "vocab.json").unlink()
    elif how == "no_weights":
        (folder / "model.safetensors").unlink()
    elif how == "shape":
        config["encoder_ffn_dim"] = config["decoder_ffn_dim"] = 48
    elif how == "separate":
        (folder / "tokenizer_config.json").write_text(json.dumps({"separate_vocabs": True}))
    elif how == "untied":
        state = load_file(str(folder / "model.safetensors"))
        state["lm_head.weight"] = state["model.shared.weight"] + 1.0
        save_file(state, str(folder / "model.safetensors"))
    elif how == "activation":
        config["activation_function"] = "tanh"
    elif how == "link":
        (folder / "source.spm").unlink()
        (folder / "source.spm").symlink_to(checkpoint / "source.spm")
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("bert", r"holds no Marian model \(config.json: model_type 'bert'\)"),
        ("no_vocab", r"has no vocab.json"),
        ("no_weights", r"has no model.safetensors or pytorch_model.bin"),
        ("shape", r"fc1.weight has shape \(64, 32\), expected \(48, 32\)"),
        ("separate", r"separate source and target vocabularies"),
        ("untied", r"lm_head.weight differs from shared.weight: untied embeddings"),
        ("activation", r"activation_function 'tanh' is not supported"),
        ("link", r"source.spm in .* is not a regular file"),
    ],
)
def test_bad_folders_get_one_line_and_change_nothing(
    checkpoint: Path, tmp_path: Path, how: str, message: str
) -> None:
    folder = _broken(checkpoint, tmp_path, how)
    out = tmp_path / "out"
    with pytest.raises(MarianError, match=message) as caught:
        convert_marian(folder, out)
    assert "\n" not in str(caught.value)
    assert not out.exists()
    assert is_marian(folder) == (how != "bert")


def test_the_model_cards_numbers_become_a_note(checkpoint: Path, tmp_path: Path) -> None:
    folder = tmp_path / "opus-mt-zh-en"
    shutil.copytree(checkpoint, folder)
    (folder / "README.md").write_text(
        "# opus-mt-zh-en\n\n## Benchmarks\n\n| testset | BLEU | chr-F |\n"
        "|-----------------------|-------|-------|\n| Tatoeba-test.zho.eng | 36.1 | 0.548 |\n",
        encoding="utf-8",
    )
    opened = read_marian(folder)
    assert opened.source["card"] == [
        {"testset": "Tatoeba-test.zho.eng", "BLEU": "36.1", "chr-F": "0.548"}
    ]
    assert card_summary(opened.source) == "Model card: Tatoeba-test.zho.eng: BLEU 36.1, chr-F 0.548"


def adam_step_bound(t: int, beta1: float, beta2: float) -> float:
    """The most |m̂_t| / √v̂_t can be at Adam's step t, whatever the gradients (Cauchy-Schwarz
    over the moving averages): one step moves a weight by at most lr_t times this (1 at t = 1,
    at most 7.3 with β = (0.9, 0.999))."""
    ratio = beta1**2 / beta2
    return (
        (1 - beta1)
        / (1 - beta1**t)
        * math.sqrt((1 - beta2**t) / (1 - beta2))
        * math.sqrt(sum(ratio**k for k in range(t)))
    )


def test_one_epoch_on_50_pairs_nudges_the_model_within_the_schedule(
    checkpoint: Path, tmp_path: Path
) -> None:
    """A smoke test of the recipe's branch for pretrained models: one epoch on 50 pairs moves
    no weight by more than its learning rates allow, and the held-out pairs of the same task
    are not made worse (BLEU and loss before/after are printed)."""
    convert_marian(checkpoint, tmp_path / "imported")
    before = load_model(tmp_path / "imported")
    task = toy_pairs(70, 11)
    train_pairs, held_out = task[:50], task[50:]
    cfg = TrainConfig(epochs=1, precision="fp32", device="cpu", progress_every_s=0.0)
    result = train(
        train_pairs, None, cfg, out_dir=tmp_path / "tuned", init_from=tmp_path / "imported"
    )
    after = load_model(tmp_path / "tuned")
    metrics = result.metrics
    assert (metrics["peak_lr"], metrics["epochs"]) == (PRETRAINED_PEAK_LR, 1)
    assert after.config["pretrained"] == before.config["pretrained"]

    beta1, beta2 = result.train_config.adam_betas
    allowed = metrics["peak_lr"] * sum(
        adam_step_bound(t, beta1, beta2) for t in range(1, metrics["steps"] + 1)
    )
    old, new = before.model.state_dict(), after.model.state_dict()
    moved = max(float((new[k] - old[k]).abs().max()) for k in old)
    assert 0 < moved <= allowed + 1e-7, (moved, allowed)

    def held_out_scores(loaded) -> tuple[float, float]:
        examples = encode_pairs(held_out, loaded.tokenizers, loaded.model.cfg.max_len)
        loss = evaluate_loss(loaded.model, examples, torch.device("cpu"), None, 10_000)
        texts = [r.text for r in translate(loaded, [s for s, _ in held_out])]
        return loss, score(texts, [t for _, t in held_out])["bleu"]

    (loss_before, bleu_before), (loss_after, bleu_after) = map(held_out_scores, (before, after))
    print(  # the smoke test's numbers, for the record (pytest -s)
        f"\n50 pairs, 1 epoch, {metrics['steps']} steps, peak {metrics['peak_lr']}: largest "
        f"weight change {moved:.2e} (allowed {allowed:.2e}); held-out loss {loss_before:.4f} "
        f"-> {loss_after:.4f}, BLEU {bleu_before:.2f} -> {bleu_after:.2f}"
    )
    assert loss_after <= 1.01 * loss_before  # not destroyed: within 1 % of where it was
    assert bleu_after >= bleu_before - 1.0


def test_a_minutes_budget_is_calibrated_on_the_pretrained_model_itself(
    checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The calibration that projects minutes to tokens times the model being fine-tuned, not
    the preset's, and the 50 pairs without validation are not memorised."""
    convert_marian(checkpoint, tmp_path / "imported")
    timed: list[ModelConfig] = []

    def fake_measure(mcfg: ModelConfig, *args, **kwargs) -> Calibration:
        timed.append(mcfg)
        return Calibration(50.0, 3, 1.0, 1, "fp32", 1)

    monkeypatch.setattr(calibration_module, "measure", fake_measure)
    cfg = TrainConfig(time_budget_s=2, precision="fp32", device="cpu")
    result = train(toy_pairs(50, 12), None, cfg, init_from=tmp_path / "imported")
    assert timed == [load_model(tmp_path / "imported").model.cfg]
    assert result.metrics["budget_tokens"] == int(2 * 50.0 * 0.9)
    assert (
        result.metrics["stop_reason"] != "memorised"
        and result.metrics["peak_lr"] == PRETRAINED_PEAK_LR
    )
