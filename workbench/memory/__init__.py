"""The corpus at decoding time, without training: the kNN-MT datastore of a (version, corpus)
(``datastore``)."""
