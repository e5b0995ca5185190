"""The corpus at translation time, without training: memory matches beside each translation
(``matches``, ``recall``), kept in step with every write to the pairs (``following``); a CAT
tool's XLIFF file translated with the version and, where asked, the memory
(``file_translation``); and retrieval-augmented decoding (kNN-MT), a datastore of decoder
states per (version, corpus) that follows the corpus' train pairs (``datastore``). Above
``models`` (it translates), below the front ends."""
