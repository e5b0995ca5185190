"""Model versions: what training produced, and translating with it.

- ``registry``: a version is a database row plus a folder of weights and tokenizer.
- ``model_import``: a model made elsewhere (ours, or a public Marian checkpoint) checked and
  registered, with its origin (file, format, hub id, licence); ``archives``: a zip of one,
  unpacked safely; ``staging``: the folder an import works in, swept when the import died.
- ``translation``: translate with a stored version, flag inputs it cannot be trusted on,
  turn a corrected output into a pair.
- ``engines`` (who decodes: the hand-written decoder or CTranslate2), ``ctranslate2_export``
  and ``ctranslate2_translator``.

Imports ``corpus`` (a version belongs to a corpus; glossaries steer translation), never the
packages above it.
"""
