"""The project's own test machinery (not public API): the multi-rank
compiled-vs-eager numerics checks (``numerics``)."""
