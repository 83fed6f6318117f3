"""Side-by-side benchmark of mla's kernels and their peers (python -m mla.bench compare)."""
