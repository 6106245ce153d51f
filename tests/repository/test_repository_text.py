"""The repository's text speaks to a reader who has only the repository: no work-journal wording
(numbered work sessions), no numbers of this project's own issue tracker, no file names of the
specification drafts.  A comment cites a draft by its title and section (e.g. "the SilvanForge
paper draft, section 'Scheduling Language'") and says the reason for a choice, not when it was
made; a public project's issue is cited with its project (dmlc/xgboost#12189).  The patterns are
in PATTERNS; test_patterns_catch_what_they_are_for shows what each one catches."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from support_common import REPOSITORY as ROOT

# Each pattern is built so that this file's own text never matches it.
PATTERNS = {
    "journal session": re.compile(r"\bsessions? [0-9]|\bsession-[0-9]|\bthis session\b|\bsession's\b",
                                  re.IGNORECASE),
    # A number in brackets after "#" is a tracker reference too; other "#" numbers (colours) are not.
    "own issue number": re.compile(r"\b(?:issues?|pr|pull request|bug) ?#?[0-9]|\bissue-[0-9]|\(#[0-9]{1,5}\)",
                                   re.IGNORECASE),
    "draft file name": re.compile(r"\bseeds? 00[0-9]|\bseeds/", re.IGNORECASE),
}
# Where a pattern's words mean something else: ONNX Runtime's InferenceSession objects.
ALLOWED = re.compile(r"InferenceSession|SessionOptions")
TEXT_SUFFIXES = {".py", ".md", ".c", ".h", ".toml", ".txt", ".cfg", ".sh", ".ll", ".json", ".yml",
                 ".yaml", ".pyi", ""}


def tracked_text_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    paths = [ROOT / p for p in out.stdout.decode().split("\0") if p]
    return [p for p in paths if p.suffix in TEXT_SUFFIXES and p.is_file()]


def hits(text: str) -> list[tuple[int, str, str]]:
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for name, pattern in PATTERNS.items():
            match = pattern.search(line)
            if match and not ALLOWED.search(line[max(0, match.start() - 20):match.end() + 20]):
                found.append((number, name, line.strip()))
    return found


def test_patterns_catch_what_they_are_for():
    # Joined at run time so that this file's own lines stay clean.
    samples = ["".join(parts) for parts in [("measured in sess", "ion 12"), ("see iss", "ue 4"),
               ("se", "ed 004, section 4"), ("this sess", "ion"), ("issue #", "17"),
               ("the iss", "ue-4 suite"), ("(#", "17)")]]
    for sample in samples:
        assert hits(sample), sample
    clean = ["dmlc/xgboost#12189", "ort.InferenceSession(blob)", "random seed 1", "# 64 rows",
             "`#[0-9a-f]` colours", 'color="#333333"', "color: #1f77b4", "print(f'#{n}')"]
    for sample in clean:
        assert not hits(sample), sample


def test_no_journal_or_tracker_wording_in_tracked_files():
    problems = []
    for path in tracked_text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, name, line in hits(text):
            problems.append(f"{path.relative_to(ROOT)}:{number}: {name}: {line[:120]}")
    assert not problems, "\n".join(problems)
