"""Errors of the cluster model: each says what is wrong and what to do instead."""

from __future__ import annotations

from ncclsim import NcclsimError


class ClusterError(NcclsimError, ValueError):
    """A cluster that cannot exist (inconsistent host, impossible override)."""


class UnknownPresetError(ClusterError):
    """No preset of that name; the message lists the available ones."""


class PresetFormatError(ClusterError):
    """A preset file that does not follow the format (topologies/README.md)."""
