"""Run scenario transcripts: `python -m tests.raft.run [--rewrite] [file ...]`.

Without files, runs every tests/raft/scenarios/*.txt. Prints a diff for each transcript
whose trace differs; with --rewrite, writes the actual traces into the files instead.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

from tests.raft.scenario import run_text

SCENARIOS = Path(__file__).parent / "scenarios"


def check(path: Path, rewrite: bool) -> bool:
    expected, actual = run_text(path.read_text())
    if expected == actual:
        return True
    if rewrite:
        path.write_text(actual)
        print(f"rewrote {path}")
        return True
    sys.stdout.writelines(
        difflib.unified_diff(expected.splitlines(True), actual.splitlines(True),
                             str(path), "actual")
    )
    return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rewrite", action="store_true", help="write actual traces into files")
    ap.add_argument("files", nargs="*", type=Path)
    args = ap.parse_args(argv)
    files = args.files or sorted(SCENARIOS.glob("*.txt"))
    bad = [f for f in files if not check(f, args.rewrite)]
    print(f"transcripts: {len(files) - len(bad)} passed, {len(bad)} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
