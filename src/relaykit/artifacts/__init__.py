"""Artifact services: named, versioned blobs per session (and per user for ``user:`` names).

``InMemoryArtifactService`` keeps them in the process; ``FileArtifactService`` keeps them as
files under a root folder that several processes may share. Both follow ``ArtifactService``.
"""

from relaykit.artifacts.base import (
    ArtifactService,
    validate_artifact_name,
    validate_artifact_scope,
)
from relaykit.artifacts.file import FileArtifactService
from relaykit.artifacts.memory import InMemoryArtifactService

__all__ = [
    "ArtifactService",
    "FileArtifactService",
    "InMemoryArtifactService",
    "validate_artifact_name",
    "validate_artifact_scope",
]
