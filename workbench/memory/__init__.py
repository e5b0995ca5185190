"""The corpus at translation time, without training: memory matches beside each translation
(``matches``, ``recall``), kept in step with every write to the pairs (``following``), and
a CAT tool's XLIFF file translated with the version and, where asked, the memory
(``file_translation``). Above ``models`` (it translates), below the front ends."""
