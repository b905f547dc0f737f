"""The committed stubs are what generate.sh makes from proto/lock/v1 now."""

from __future__ import annotations

import filecmp
import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.join(HERE, "..")


def tree(root):
    out = set()
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        out |= {os.path.relpath(os.path.join(d, f), root) for f in files if f.endswith(".py")}
    return out


def test_the_committed_stubs_are_current(tmp_path):
    run = subprocess.run(["bash", os.path.join(PKG, "generate.sh"), str(tmp_path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    committed = os.path.join(PKG, "lockd", "_gen")
    assert tree(tmp_path) == tree(committed)
    stale = [f for f in sorted(tree(committed)) if not filecmp.cmp(tmp_path / f, os.path.join(committed, f), shallow=False)]
    assert not stale, f"stale stubs (run bash clients/python/generate.sh): {stale}"
