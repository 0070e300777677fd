"""Measured datasets for the learned estimators: zoo sweeps (``collect``) and graph features (``features_table``).

The data live in ``datasets/`` at the repository root; ``profilers/collect_dataset.py`` is the command that
fills them.
"""
