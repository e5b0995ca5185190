"""The reserved token ids, defined once: every tokenizer maps them to the same pieces and the
model config never depends on which tokenizer was used."""

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
SPECIAL_PIECES = ("<pad>", "<s>", "</s>", "<unk>")  # indexed by the ids above
