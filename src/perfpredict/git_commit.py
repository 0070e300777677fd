"""The git commit a result was made at, for provenance (no heavy imports: the experiments' scripts use it)."""

from __future__ import annotations

from pathlib import Path


def git_commit_of(repo: str | Path = ".") -> str | None:
    """``HEAD``'s commit (with ``-dirty`` when the tree has changes), or None outside a git checkout."""
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


__all__ = ["git_commit_of"]
