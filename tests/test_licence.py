"""The licence travels with the code: LICENSE and NOTICE at the root, the package metadata
naming the licence, and every bundled third-party file named in NOTICE."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_project_is_apache_2_and_says_so_in_its_metadata() -> None:
    assert (
        "Apache License\n                           Version 2.0, January 2004"
        in (ROOT / "LICENSE").read_text()
    )
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    assert set(project["license-files"]) == {"LICENSE", "NOTICE"}  # shipped in the wheel's dist-info


def test_every_bundled_model_file_is_in_the_one_notice() -> None:
    notice = (ROOT / "NOTICE").read_text()
    models = ROOT / "memproxy" / "index" / "models"
    bundled = [p for p in models.rglob("*") if p.is_file() and p.name != "memproxy-embedding.json"]
    assert bundled  # the tokenizer at least
    for path in bundled:
        assert path.relative_to(ROOT).as_posix() in notice, path
    # One place: no second copy of a notice to drift apart from this one.
    assert not [p for p in ROOT.joinpath("memproxy").rglob("*") if p.name in ("NOTICE", "LICENSE")]


def test_the_image_build_has_the_files_the_licence_metadata_names() -> None:
    copied = [line for line in (ROOT / "Dockerfile").read_text().splitlines() if line.startswith("COPY ")]
    assert any("LICENSE" in line and "NOTICE" in line for line in copied), copied
