"""The corpus at translation time, without training: memory matches beside each translation
(``matches``, ``recall``), kept in step with every write to the pairs (``following``)."""
