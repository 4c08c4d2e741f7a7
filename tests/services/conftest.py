"""Fixtures for the artifact and memory services: each artifact store, empty."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from relaykit.artifacts import FileArtifactService, InMemoryArtifactService


@dataclass
class ArtifactCase:
    """An artifact store under test, and a look at what it holds."""

    kind: str
    service: Any
    #: Everything stored: file paths under the root, or (scope, name, versions) in memory.
    stored: Callable[[], list[Any]]


def files_under(root: Path) -> list[str]:
    """Every file and folder under ``root`` (hidden ones too), relative and sorted."""
    found: list[str] = []
    for folder, dirs, files in os.walk(root):
        for entry in [*dirs, *files]:
            found.append(os.path.relpath(os.path.join(folder, entry), root))
    return sorted(found)


@pytest.fixture(params=["memory", "file"])
def case(request: pytest.FixtureRequest, tmp_path: Path) -> ArtifactCase:
    """Each artifact store, empty (the file store's root is an empty folder)."""
    if request.param == "memory":
        memory = InMemoryArtifactService()
        return ArtifactCase(
            "memory",
            memory,
            lambda: [
                (scope, name, len(versions))
                for scope, names in memory._artifacts.items()
                for name, versions in names.items()
            ],
        )
    root = tmp_path / "artifacts"
    root.mkdir()
    return ArtifactCase("file", FileArtifactService(root), lambda: files_under(root))
